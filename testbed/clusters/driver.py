"""Which DRA driver runs on a cluster's GPU nodes: the seam between a backend and the driver under test.

Drivers register themselves here (kwok's runtime registry, kind's providers): each is a `DriverKind`
naming what it is, the backends it runs on and, per backend, the class that deploys it there. The driver
packages live in testbed/drivers/, one folder each; adding a driver touches its own folder only.

A `DriverSpec` is one driver as a cluster runs it: the registered driver, the DRA driver name its
ResourceSlices carry, how it runs (a binary or an image where the driver takes one) and the environment
added to its processes (fault switches, vendor settings). `parse_driver` is the one parser of the
`--driver` vocabulary, for every command and the pytest plugin.
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping

from fake_gpus.driver.identity import DEFAULT_DRIVER, DRIVER_ENV, current_identity
from testbed.errors import BadInputError

OURS = "ours"  # this project's fake-GPU driver: the default
BINARY, IMAGE = "binary", "image"  # the ways a vendor's driver runs besides its own default


class DriverSpecError(BadInputError):
    """A driver spec that cannot be honoured as given; the message is one line for the user."""


@dataclass(frozen=True)
class DriverKind:
    """A registered driver under test.

    `backends` maps a backend name to "module:Class" of the class that runs the driver there (imported on
    first use, so that `dra-testbed --help` loads no backend). `ways` are the ways it takes besides its
    default: BINARY (`--driver-binary PATH`, a kubelet-plugin executable), IMAGE (`--driver-image REF`);
    `find_binary` says where its binary is when BINARY is its default and none is given (one-line
    DriverSpecError when nowhere)."""

    name: str
    summary: str
    backends: Mapping[str, str]
    ways: tuple[str, ...] = ()
    find_binary: Callable[[str | None], Path] | None = None

    def implementation(self, backend: str) -> type:
        """The class that runs this driver on `backend`; DriverSpecError naming the backends it runs on."""
        if backend not in self.backends:
            raise DriverSpecError(f"the {backend} backend cannot run driver {self.name!r}; it runs on: {', '.join(self.backends)}")
        module, _, cls = self.backends[backend].partition(":")
        return getattr(importlib.import_module(module), cls)


_REGISTRY: dict[str, DriverKind] = {}


def register(kind: DriverKind) -> DriverKind:
    """Make `kind` known to every command, backend and the pytest plugin (a second registration of a name replaces
    the first, so a test can register a variant)."""
    _REGISTRY[kind.name] = kind
    return kind


def unregister(name: str) -> None:
    """Forget a registered driver (tests that registered one of their own)."""
    _REGISTRY.pop(name, None)


def registered() -> dict[str, DriverKind]:
    """Every registered driver by name, ours first."""
    return dict(sorted(_REGISTRY.items(), key=lambda item: (item[0] != OURS, item[0])))


def driver_kind(name: str) -> DriverKind:
    """The registered driver `name`; DriverSpecError listing the registered ones otherwise."""
    try:
        return _REGISTRY[name]
    except KeyError:
        valid = ", ".join(registered()) or "none (no driver package was loaded)"
        named = " (a DRA driver name such as gpu.nvidia.com goes in --driver-name)" if "." in name else ""
        raise DriverSpecError(f"unknown driver {name!r}; valid: {valid}{named}") from None


def implementations(backend: str) -> list[type]:
    """The class of every registered driver that runs on `backend` (a backend stops whichever of them runs)."""
    return [kind.implementation(backend) for kind in registered().values() if backend in kind.backends]


@dataclass(frozen=True)
class DriverSpec:
    """The driver of a cluster: `driver` is a registered driver, `name` the DRA driver name its ResourceSlices
    carry, `path` its kubelet-plugin executable and `image` its image where it runs from one, `env` what its
    processes get added to their environment."""

    driver: str = OURS
    name: str = field(default_factory=lambda: current_identity().driver)  # $DRA_TESTBED_DRIVER_NAME or NVIDIA's
    path: str | None = None
    image: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.path and self.image:
            raise DriverSpecError("a driver runs from either a binary or an image, not both")
        if self.path is not None and not self.path:
            raise DriverSpecError("a driver binary needs the path of its kubelet-plugin executable")
        if self.image is not None and not self.image.strip():
            raise DriverSpecError("a driver image needs an image reference, e.g. registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v25.8.0")

    @property
    def way(self) -> str:
        """How it runs: BINARY, IMAGE, or the driver's own way (its name)."""
        return BINARY if self.path else IMAGE if self.image else self.driver

    def with_env(self, env: dict[str, str]) -> DriverSpec:
        """This driver with `env` added to its environment."""
        return DriverSpec(self.driver, self.name, self.path, self.image, {**self.env, **env})

    def process_env(self) -> dict[str, str]:
        """What our driver's processes get added to their environment: `env`, and the driver name when
        it is not the default (ours reads it from $DRA_TESTBED_DRIVER_NAME)."""
        named = {DRIVER_ENV: self.name} if self.driver == OURS and self.name != DEFAULT_DRIVER else {}
        return {**named, **self.env}

    def implementation(self, backend: str):
        """An instance of the class that runs this driver on `backend`; DriverSpecError when it cannot."""
        return driver_kind(self.driver).implementation(backend)(self)

    def as_dict(self) -> dict:
        """The spec as recorded in a cluster's spec.json (and compared by --reuse-cluster)."""
        return {"driver": self.driver, "name": self.name, "path": self.path, "image": self.image, "env": dict(sorted(self.env.items()))}

    @classmethod
    def from_dict(cls, data: dict) -> DriverSpec:
        # a spec.json written before drivers were registered says "kind": ours, binary or image (the last two NVIDIA's)
        driver = data.get("driver") or (OURS if data.get("kind", OURS) == OURS else "nvidia")
        return cls(driver, data.get("name") or current_identity().driver, data.get("path"), data.get("image"), dict(data.get("env") or {}))


def parse_driver(text: str = OURS, name: str | None = None, binary: str | None = None, image: str | None = None) -> DriverSpec:
    """The `--driver NAME` vocabulary with its `--driver-binary PATH`, `--driver-image REF` and `--driver-name`
    options: a registered driver, run from the given binary or image where it takes one (a driver whose
    default way is a binary is found by its `find_binary` when none is given); DriverSpecError otherwise."""
    kind = driver_kind(text)
    dra_name = name or current_identity().driver
    if binary and image:
        raise DriverSpecError("give either --driver-binary PATH or --driver-image IMAGE, not both")
    if image is not None:
        if IMAGE not in kind.ways:
            raise DriverSpecError(f"--driver-image does not go with driver {text!r}; it goes with: {_taking(IMAGE)}")
        return DriverSpec(text, dra_name, image=image)
    if binary is not None or kind.find_binary is not None:
        if BINARY not in kind.ways:
            raise DriverSpecError(f"--driver-binary does not go with driver {text!r}; it goes with: {_taking(BINARY)}")
        if kind.find_binary is not None:
            return DriverSpec(text, dra_name, path=str(kind.find_binary(binary)))
        return DriverSpec(text, dra_name, path=str(_executable(binary)))
    return DriverSpec(text, dra_name)


def driver_options(default: str | None = OURS, what: str = "the DRA driver on the GPU nodes") -> list[tuple[str, dict]]:
    """The `--driver` options (flag, argparse keywords), the same for every command and for the pytest plugin:
    `--driver NAME` (a registered driver; None as `default` makes it optional), `--driver-binary`, `--driver-image`
    and `--driver-name`. Registered drivers are listed in the help as they are registered when it is built."""
    drivers = registered()
    listing = "; ".join(f"{name}: {kind.summary}" for name, kind in drivers.items())
    return [
        ("--driver", dict(default=default, metavar="|".join(drivers) or "NAME",
                          help=f"{what}{f' (default: {default})' if default else ''}. {listing}")),
        ("--driver-binary", dict(metavar="PATH", help="run the driver from this kubelet-plugin executable (drivers that take "
                                 "one; NVIDIA's is found by default: see docs/user/nvidia-driver.md)")),
        ("--driver-image", dict(metavar="IMAGE", help="on kind: run this image of the driver (in the local Docker engine) "
                                "instead of building one around its binary")),
        ("--driver-name", dict(metavar="NAME", help="the DRA driver name its ResourceSlices carry (default: gpu.nvidia.com)")),
    ]


def spec_from_options(options) -> DriverSpec | None:
    """The DriverSpec the `driver_options` of a parsed command line name (an argparse namespace or pytest's option):
    None when --driver has no default and none was given; DriverSpecError when they do not fit together."""
    if options.driver is None:
        return None
    return parse_driver(options.driver, options.driver_name, options.driver_binary, options.driver_image)


def _taking(way: str) -> str:
    return ", ".join(k.name for k in registered().values() if way in k.ways) or "no registered driver"


def _executable(path: str | None) -> Path:
    given = Path(path or "").expanduser()
    if not path or not given.is_file() or not os.access(given, os.X_OK):
        raise DriverSpecError(f"--driver-binary {path!r} is not an executable file; give the path of a kubelet-plugin executable")
    return given.resolve()


def unsupported(backend: str, driver: DriverSpec, supported: tuple[str, ...]) -> str:
    """The one-line refusal of a backend that cannot run `driver` the way it is given."""
    return f"the {backend} backend cannot run driver {driver.driver!r} from {driver.way!r}; valid here: {', '.join(supported)}"
