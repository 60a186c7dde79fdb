"""NVIDIA's DRA driver (kubernetes-sigs/dra-driver-nvidia-gpu) under test: its gpu-kubelet-plugin, a test input
never part of the project, run from its binary (found as binary.py says) or, on kind, from an image."""

from __future__ import annotations

from pathlib import Path

from testbed.clusters.driver import BINARY, IMAGE, DriverKind, DriverSpecError, register


def _find_binary(explicit: str | None) -> Path:
    """The plugin by binary.py's order; a plugin nowhere to be found is refused in one line before anything starts
    (the backends say which binary runs when they start it)."""
    from testbed.drivers.nvidia.binary import PluginNotFound, find_plugin

    try:
        return find_plugin(explicit).path
    except PluginNotFound as exc:
        raise DriverSpecError(str(exc)) from None


register(DriverKind(
    name="nvidia",
    summary="NVIDIA's gpu-kubelet-plugin from its binary (--driver-binary, else found beside the checkout) or, on kind, an image (--driver-image)",
    backends={"kwok": "testbed.drivers.nvidia.kwok:NvidiaBinaryDriver", "kind": "testbed.drivers.nvidia.kind:NvidiaKindDriver"},
    ways=(BINARY, IMAGE),
    find_binary=_find_binary,
))
