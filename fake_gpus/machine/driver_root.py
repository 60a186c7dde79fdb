"""A node's NVIDIA driver root: libnvidia-ml.so.<driverVersion> (+ .so.1) and nvidia-smi, as the driver installs them.

NVIDIA's DRA driver takes `--nvidia-driver-root` and looks there for libnvidia-ml.so.1 (in
/usr/lib/x86_64-linux-gnu and the other usual library directories) and a regular `nvidia-smi` file
(/usr/bin, ...), loads NVML from that library and mounts both into containers through CDI.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from pathlib import Path

from fake_gpus.nvml.build import SONAME, ensure_library

DRIVER_ROOT_DIR = "driver-root"
LIB_DIR = Path("usr/lib/x86_64-linux-gnu")
SMI = Path("usr/bin/nvidia-smi")
_REPO = Path(__file__).resolve().parents[2]


def _smi_script(state_dir: Path) -> str:
    # a stand-in until the C nvidia-smi exists: the project's fake-nvidia-smi on this node's state
    return ("#!/bin/sh\n"
            f": \"${{FAKE_NVML_STATE_DIR:={shlex.quote(str(state_dir))}}}\"\n"
            "export FAKE_NVML_STATE_DIR\n"
            f"PYTHONPATH={shlex.quote(str(_REPO))}${{PYTHONPATH:+:$PYTHONPATH}} exec {shlex.quote(sys.executable)} "
            "-m fake_gpus.nvml.smi \"$@\"\n")


def write_driver_root(state_dir: Path, driver_version: str) -> Path:
    """`<state>/driver-root` holding the fake library (a copy, as a real install's regular file) and nvidia-smi."""
    root = Path(state_dir) / DRIVER_ROOT_DIR
    lib_dir = root / LIB_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    real = lib_dir / f"libnvidia-ml.so.{driver_version}"
    tmp = real.with_name(real.name + f".tmp.{os.getpid()}")
    shutil.copyfile(ensure_library() / SONAME, tmp)
    os.replace(tmp, real)
    for name in (SONAME, "libnvidia-ml.so"):
        link = lib_dir / name
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(real.name)
    smi = root / SMI
    smi.parent.mkdir(parents=True, exist_ok=True)
    smi.write_text(_smi_script(Path(state_dir)))
    smi.chmod(0o755)
    return root
