"""The /proc entries of a node with NVIDIA's kernel modules loaded: /proc/devices and nvidia-caps.

/proc/devices lists the character-device majors of nvidia (195, fixed), nvidia-uvm and nvidia-caps
(dynamic in a real kernel; fixed here so device nodes made for containers agree with it). NVIDIA's
driver reads the nvidia-caps major from it (or from ALT_PROC_DEVICES_PATH) for MIG device nodes.
The capability files themselves (proc/driver/nvidia/capabilities) are kept by the fake NVML library.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Sequence

from fake_gpus.node.device_majors import NVIDIA_CAPS_MAJOR, NVIDIA_MAJOR, NVIDIA_UVM_MAJOR
from fake_gpus.nvml.capabilities import MIG_MINORS, mig_minors_text

PROC_DEVICES = Path("proc/devices")
PROC_DRIVER = Path("proc/driver")

_CHAR = ((1, "mem"), (4, "/dev/vc/0"), (4, "tty"), (5, "/dev/tty"), (5, "/dev/console"), (5, "/dev/ptmx"),
         (10, "misc"), (136, "pts"), (NVIDIA_MAJOR, "nvidia-frontend"), (NVIDIA_CAPS_MAJOR, "nvidia-caps"),
         (NVIDIA_UVM_MAJOR, "nvidia-uvm"))
_BLOCK = ((7, "loop"), (8, "sd"), (259, "blkext"))


def proc_devices_text() -> str:
    """/proc/devices of the node: character majors including NVIDIA's, then block majors."""
    lines = ["Character devices:", *(f"{m:3d} {n}" for m, n in _CHAR), "", "Block devices:", *(f"{m:3d} {n}" for m, n in _BLOCK)]
    return "\n".join(lines) + "\n"


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_procfs(state_dir: Path, gpu_minors: Sequence[int]) -> None:
    """`<state>/proc/devices` and `<state>/proc/driver/nvidia-caps/mig-minors` (the static parts)."""
    root = Path(state_dir)
    _write(root / PROC_DEVICES, proc_devices_text())
    _write(root / MIG_MINORS, mig_minors_text(gpu_minors))
