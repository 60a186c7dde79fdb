"""A node's NVIDIA driver root: libnvidia-ml.so.<driverVersion> (+ .so.1) and nvidia-smi, as the driver installs them.

nvidia-smi is the C one built with the library (fake_gpus/nvml/src/tools), a plain NVML client; the
library copy here knows its node (it finds the state directory above the driver root when
FAKE_NVML_STATE_DIR is unset), so running it by hand shows the node.

NVIDIA's DRA driver takes `--nvidia-driver-root` and looks there for libnvidia-ml.so.1 (in
/usr/lib/x86_64-linux-gnu and the other usual library directories) and a regular `nvidia-smi` file
(/usr/bin, ...), loads NVML from that library and mounts both into containers through CDI.
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from fake_gpus.node.driver_root import DRIVER_ROOT_DIR, LIB_DIR, LINKER_NAME, SMI
from fake_gpus.nvml.build import SMI as SMI_BINARY, SONAME, ensure_library


def device_nodes(gpu_minors: list[int], mig_manager: bool = False) -> dict[str, tuple[int, int]]:
    """Name under /dev -> (major, minor) of the node's NVIDIA device nodes: nvidia<minor> per GPU, nvidiactl,
    nvidia-uvm(-tools); with `mig_manager` also the node-wide nvidia-caps of mig/config and mig/monitor."""
    from fake_gpus.node.device_majors import NVIDIA_CAPS_MAJOR, NVIDIA_MAJOR, NVIDIA_UVM_MAJOR

    nodes = {f"nvidia{m}": (NVIDIA_MAJOR, m) for m in gpu_minors}
    nodes.update({"nvidiactl": (NVIDIA_MAJOR, 255), "nvidia-uvm": (NVIDIA_UVM_MAJOR, 0), "nvidia-uvm-tools": (NVIDIA_UVM_MAJOR, 1)})
    if mig_manager:
        nodes.update({"nvidia-caps/nvidia-cap1": (NVIDIA_CAPS_MAJOR, 1), "nvidia-caps/nvidia-cap2": (NVIDIA_CAPS_MAJOR, 2)})
    return nodes


def write_device_nodes(root: Path, gpu_minors: list[int]) -> None:
    """`<root>/dev/nvidia<minor>`, nvidiactl, nvidia-uvm(-tools) as character devices with NVIDIA's majors.

    NVIDIA's driver takes a driver root holding /dev as the device root and puts these nodes into CDI
    specs. Nothing backs them (opening one fails): they only have to exist with the right numbers.
    Needs root (mknod); without it the nodes are left out."""
    dev = root / "dev"
    (dev / "nvidia-caps").mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return
    for name, (major, minor) in device_nodes(gpu_minors).items():
        path = dev / name
        if path.exists() and path.is_char_device() and os.stat(path).st_rdev == os.makedev(major, minor):
            continue
        path.unlink(missing_ok=True)
        os.mknod(path, 0o666 | stat.S_IFCHR, os.makedev(major, minor))


def _install(source: Path, dest: Path, mode: int) -> None:
    """`dest` as a regular file with `source`'s content: a hard link when both are on one filesystem (a fleet
    of thousands of KWOK nodes would otherwise hold thousands of copies, 350 KB each), else a copy. Each
    node's library still has a path of its own, which is how it finds its node; no process loads two nodes'."""
    if dest.exists() and os.path.samefile(source, dest):
        return
    tmp = dest.with_name(dest.name + f".tmp.{os.getpid()}")
    tmp.unlink(missing_ok=True)
    try:
        os.link(source, tmp)
    except OSError:  # another filesystem (or one without links): a copy
        shutil.copyfile(source, tmp)
        tmp.chmod(mode)
    os.replace(tmp, dest)


def write_driver_root(state_dir: Path, driver_version: str, gpu_minors: list[int] | None = None) -> Path:
    """`<state>/driver-root` holding the fake library (a regular file, as a real install's), nvidia-smi
    and the GPUs' device nodes."""
    root = Path(state_dir) / DRIVER_ROOT_DIR
    lib_dir = root / LIB_DIR
    lib_dir.mkdir(parents=True, exist_ok=True)
    real = lib_dir / f"libnvidia-ml.so.{driver_version}"
    _install(ensure_library() / SONAME, real, 0o755)
    for name in (SONAME, LINKER_NAME):
        link = lib_dir / name
        if not link.is_symlink():
            link.unlink(missing_ok=True)
            link.symlink_to(real.name)
    smi = root / SMI  # the C nvidia-smi, linked against libnvidia-ml.so.1 (its rpath finds the copy above)
    smi.parent.mkdir(parents=True, exist_ok=True)
    _install(ensure_library() / SMI_BINARY, smi, 0o755)
    write_device_nodes(root, gpu_minors or [])
    return root
