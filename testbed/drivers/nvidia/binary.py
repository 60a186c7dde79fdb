"""Where NVIDIA's gpu-kubelet-plugin binary is: an explicit path, or $DRA_TESTBED_NVIDIA_PLUGIN.

The binary is a test input built from kubernetes-sigs/dra-driver-nvidia-gpu, never part of the project.
"""

from __future__ import annotations

import os
from pathlib import Path

PLUGIN_ENV = "DRA_TESTBED_NVIDIA_PLUGIN"
HOW_TO = (f"set {PLUGIN_ENV}=/path/to/gpu-kubelet-plugin (built from kubernetes-sigs/dra-driver-nvidia-gpu: "
          "GOFLAGS=-mod=vendor go build ./cmd/gpu-kubelet-plugin) or pass --driver-binary PATH")


class PluginNotFound(RuntimeError):
    """No usable binary; the message is one line saying how to provide it."""


def plugin_binary(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The binary to run; PluginNotFound (one line) when none is given or the path is unusable."""
    given = explicit or os.environ.get(PLUGIN_ENV)
    if not given:
        raise PluginNotFound(f"NVIDIA's gpu-kubelet-plugin is needed here: {HOW_TO}")
    path = Path(given).expanduser()
    if not path.is_file() or not os.access(path, os.X_OK):
        source = "--driver-binary" if explicit else f"${PLUGIN_ENV}"
        raise PluginNotFound(f"{source} {given!r} is not an executable file; {HOW_TO}")
    return path.resolve()
