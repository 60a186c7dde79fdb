"""What a CDI-enabled container runtime gives a container from a driver's CDI specs, so two drivers' specs compare.

A container given CDI devices gets, for each device, the containerEdits of the spec file that holds it and
the device's own: environment, device nodes, mounts, hooks. NVIDIA's specs name a library's other file
names through `nvidia-cdi-hook create-symlinks --link TARGET::LINK` hooks run in the container; ours mount
the same file under those names. Both are resolved here to the host file a container path shows, so two
specs that make the same files visible under the same names by different means give equal views.
"""

from __future__ import annotations

import json
import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

import yaml

IN_IMAGE = "(image) "  # a link whose target no spec mounts points into the container's own image


@dataclass(frozen=True)
class ContainerView:
    """files: container path -> real host path it shows (or IN_IMAGE + path); device_nodes: container paths."""

    files: dict[str, str]
    device_nodes: frozenset[str]
    env: dict[str, str]


def read_specs(cdi_dir: Path) -> list[dict]:
    """Every CDI spec file in `cdi_dir` (JSON or YAML, as the CDI spec allows)."""
    specs = []
    for path in sorted(Path(cdi_dir).iterdir()):
        if path.suffix == ".json":
            specs.append(json.loads(path.read_text()))
        elif path.suffix in (".yaml", ".yml"):
            specs.append(yaml.safe_load(path.read_text()))
    return specs


def _edits(specs: list[dict], device_id: str) -> list[dict]:
    """The spec's own containerEdits and the device's, for the fully qualified id `vendor/class=name`."""
    kind, _, name = device_id.partition("=")
    found = [(s, d) for s in specs if s.get("kind") == kind for d in s.get("devices") or [] if d.get("name") == name]
    if len(found) != 1:
        raise LookupError(f"CDI device {device_id}: {len(found)} definitions in the specs given")
    spec, device = found[0]
    return [e for e in (spec.get("containerEdits"), device.get("containerEdits")) if e]


def _links(hook: dict) -> list[tuple[str, str]]:
    """(target, link) of a create-symlinks hook; [] for any other hook."""
    args = hook.get("args") or []
    if "create-symlinks" not in args:
        return []
    return [tuple(a.split("::", 1)) for flag, a in zip(args, args[1:]) if flag == "--link"]  # type: ignore[misc]


def container_view(specs: list[dict], device_ids: list[str]) -> ContainerView:
    """The view of a container given `device_ids`: edits applied in order (a later env value wins, as in
    the runtime); links resolved to the mounted file they name (relative targets from the link's directory)."""
    files: dict[str, str] = {}
    nodes: set[str] = set()
    env: dict[str, str] = {}
    links: dict[str, str] = {}
    for device_id in device_ids:
        for edits in _edits(specs, device_id):
            env.update(e.split("=", 1) for e in edits.get("env") or [])
            nodes.update(n["path"] for n in edits.get("deviceNodes") or [])
            files.update({m["containerPath"]: os.path.realpath(m["hostPath"]) for m in edits.get("mounts") or []})
            for hook in edits.get("hooks") or []:
                links.update({link: posixpath.normpath(posixpath.join(posixpath.dirname(link), target)) for target, link in _links(hook)})
    for link, target in links.items():
        seen = {link}
        while target in links and target not in seen:  # a link to a link
            seen.add(target)
            target = links[target]
        files[link] = files.get(target, IN_IMAGE + target)
    return ContainerView(files, frozenset(nodes), env)


def mount_options(specs: list[dict], device_ids: list[str]) -> dict[str, tuple[str, ...]]:
    """Container path -> the options of the mount the specs give it for `device_ids` (the last one wins, as
    in container_view): what a view leaves out, and a sharing strategy's mounts must match in."""
    return {m["containerPath"]: tuple(m.get("options") or ()) for device_id in device_ids
            for edits in _edits(specs, device_id) for m in edits.get("mounts") or []}
