"""The layout of a node's NVIDIA driver root, as NVIDIA's driver installs it (part of the node contract).

The machine writes a driver root into each node's state directory (fake_gpus/machine/driver_root.py);
NVIDIA's DRA driver reads it through `--nvidia-driver-root`, and both drivers' CDI specs mount its
nvidia-smi and libnvidia-ml into containers. Paths are relative to the driver root, and are also where
NVIDIA's CDI spec puts the files in a container.
"""

from __future__ import annotations

import re
from pathlib import Path

DRIVER_ROOT_DIR = "driver-root"  # under a node's fake-NVML state directory
LIB_DIR = Path("usr/lib/x86_64-linux-gnu")
SMI = Path("usr/bin/nvidia-smi")
SONAME = "libnvidia-ml.so.1"
LINKER_NAME = "libnvidia-ml.so"
_VERSIONED = re.compile(r"libnvidia-ml\.so\.\d+\.\d+(\.\d+)?")


def versioned_library(root: Path) -> str | None:
    """File name of the driver root's libnvidia-ml.so.<driverVersion> (the regular file the .so.1 name
    stands for), or None when the root holds no such file."""
    names = sorted(p.name for p in (Path(root) / LIB_DIR).glob("libnvidia-ml.so.*")
                   if _VERSIONED.fullmatch(p.name) and p.is_file() and not p.is_symlink())
    return names[-1] if names else None
