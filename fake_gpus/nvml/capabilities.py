"""The nvidia-caps capability files of a node's MIG state, as a real driver shows them in /proc.

`<state>/proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access` and `.../gi<G>/ci<C>/access`
name the nvidia-caps minor of each GPU and compute instance (NVIDIA's DRA driver reads them for its
CDI device nodes). The C library rewrites the tree whenever it stores MIG state (src/caps.c); this
module writes the same tree when Python changes the state file directly, and reads it back for tests.
Minors follow nvidia-modprobe's fixed table (/proc/driver/nvidia-caps/mig-minors).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Sequence

CAPS_DIR = Path("proc/driver/nvidia/capabilities")
MIG_MINORS = Path("proc/driver/nvidia-caps/mig-minors")
GI_PER_GPU = 15
CI_PER_GI = 8
FILE_MODE = 292  # 0444, what the driver sets for MIG capability device files


def caps_minor(gpu_minor: int, gi: int, ci: int | None = None) -> int:
    """nvidia-caps minor of GPU instance `gi` (or its compute instance `ci`) of GPU `gpu_minor`."""
    base = 3 + gpu_minor * GI_PER_GPU * (1 + CI_PER_GI) + gi * (1 + CI_PER_GI)
    return base if ci is None else base + 1 + ci


def access_text(minor: int) -> str:
    return f"DeviceFileMinor: {minor}\nDeviceFileMode: {FILE_MODE}\nDeviceFileModify: 1\n"


def expected_files(gpu_minors: Sequence[int], instances: Sequence[tuple[int, int, int | None]]) -> dict[str, str]:
    """Relative path -> content of every capability file, for (gpu index, gi id, ci id or None) instances."""
    files = {str(CAPS_DIR / "mig" / "config"): access_text(1), str(CAPS_DIR / "mig" / "monitor"): access_text(2)}
    for gpu, gi, ci in instances:
        minor = gpu_minors[gpu]
        where = CAPS_DIR / f"gpu{minor}" / "mig" / f"gi{gi}"
        if ci is not None:
            where = where / f"ci{ci}"
        files[str(where / "access")] = access_text(caps_minor(minor, gi, ci))
    return files


def read_files(state_dir: Path) -> dict[str, str]:
    """Relative path -> content of every capability file under `state_dir`."""
    root = Path(state_dir)
    base = root / CAPS_DIR
    if not base.is_dir():
        return {}
    return {str(p.relative_to(root)): p.read_text() for p in sorted(base.rglob("*")) if p.is_file()}


def state_files(state_dir: Path, gpus, mig) -> dict[str, str]:
    """The files a state directory's GPU records and MigState call for (fake_gpus.nvml.state types)."""
    instances = [(r.gpu, r.id, None) for r in mig.gpu_instances]
    instances += [(r.gpu, r.gi, r.id) for r in mig.compute_instances]
    return expected_files([g.minor for g in gpus], instances)


def write_tree(state_dir: Path, gpus, mig) -> None:
    """Replace the capability tree of `state_dir` by the one its state calls for (caller holds LOCK_EX)."""
    root = Path(state_dir)
    shutil.rmtree(root / CAPS_DIR, ignore_errors=True)
    for gpu in gpus:
        (root / CAPS_DIR / f"gpu{gpu.minor}" / "mig").mkdir(parents=True, exist_ok=True)
    for rel, text in state_files(root, gpus, mig).items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f"{path.name}.tmp.{os.getpid()}")
        tmp.write_text(text)
        os.replace(tmp, path)


def mig_minors_text(gpu_minors: Sequence[int]) -> str:
    """/proc/driver/nvidia-caps/mig-minors for these GPUs (a static table in a real driver)."""
    lines = ["config 1", "monitor 2"]
    for minor in gpu_minors:
        for gi in range(GI_PER_GPU):
            lines.append(f"gpu{minor}/gi{gi}/access {caps_minor(minor, gi)}")
            lines += [f"gpu{minor}/gi{gi}/ci{ci}/access {caps_minor(minor, gi, ci)}" for ci in range(CI_PER_GI)]
    return "\n".join(lines) + "\n"
