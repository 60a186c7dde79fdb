"""Offline stand-ins for the images the AI-conformance tests name: there is no image registry here, so each
image a test pulls is provided inside the bed's nodes under the name the test uses, built from our own images.

A stand-in is not the image it stands for: it only has what the tests use of it. The probe of
TestSecureAcceleratorAccess runs `/bin/sh -c "ls /dev/nvidia* ..."` in `ubuntu:22.04`; our workload image
(Debian bookworm's base root with python3, testbed/clusters/kind/images/driver_image.py) has /bin/sh and ls.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

# `Image: "name:tag"` in a Go composite literal, as the tests name their containers' images
_IMAGE_FIELD = re.compile(r'\bImage:\s*"([^"]+)"')


@dataclass(frozen=True)
class StandIn:
    """What stands for `image` and why it is enough for the tests."""

    image: str
    built_from: str  # the image of ours that is re-tagged
    why: str

    def as_dict(self) -> dict:
        return {"image": self.image, "standIn": self.built_from, "why": self.why}


# image the tests name -> the function giving the local image of ours that stands for it
STAND_INS: dict[str, str] = {
    "ubuntu:22.04": "the workload image (Debian bookworm base: /bin/sh, ls, python3; not Ubuntu)",
}


def images_named(source: Path) -> list[str]:
    """Every image the tests' Go files under `source`/test name, sorted."""
    found = set()
    for file in sorted((source / "test").glob("*.go")):
        found.update(_IMAGE_FIELD.findall(file.read_text()))
    return sorted(found)


def uncovered(images: list[str]) -> list[str]:
    """The images among `images` that have no stand-in (tests using them cannot start their pods here)."""
    return [image for image in images if image not in STAND_INS]


def provide(images: list[str], load: Callable[[str, str], None], workload_image: Callable[[], str]) -> list[StandIn]:
    """Load a stand-in for each of `images` that has one, under the image's name, through `load(source, alias)`;
    `workload_image` builds (or finds) our workload image."""
    provided = []
    for image in images:
        if image in STAND_INS:
            source = workload_image()
            load(source, image)
            provided.append(StandIn(image, source, STAND_INS[image]))
    return provided
