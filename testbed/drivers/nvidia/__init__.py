"""NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) under test: its gpu-kubelet-plugin, a test input
never part of the project, run from its binary (found as binary.py says) or, on kind, from an image."""

from __future__ import annotations

from pathlib import Path

from testbed.clusters.driver import BINARY, IMAGE, DriverKind, DriverSpecError, register


def _find_binary(explicit: str | None) -> Path:
    """The plugin by binary.py's order, saying which one runs; a plugin nowhere to be found is refused in one line
    before anything starts."""
    from testbed.drivers.nvidia.binary import PluginNotFound, find_plugin
    from testbed.host import progress

    try:
        found = find_plugin(explicit)
    except PluginNotFound as exc:
        raise DriverSpecError(str(exc)) from None
    progress.note(f"NVIDIA's gpu-kubelet-plugin: {found}")
    return found.path


register(DriverKind(
    name="nvidia",
    summary="NVIDIA's gpu-kubelet-plugin from its binary (--driver-binary, else found beside the checkout) or, on kind, an image (--driver-image)",
    backends={"kwok": "testbed.drivers.nvidia.kwok:NvidiaBinaryDriver", "kind": "testbed.drivers.nvidia.kind:NvidiaKindDriver"},
    ways=(BINARY, IMAGE),
    find_binary=_find_binary,
))
