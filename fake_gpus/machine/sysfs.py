"""A /sys/bus/pci and /sys/devices view of a node's GPUs, as the kernel lays them out.

`bus/pci/devices/<address>` is a relative symlink into `devices/pci<domain>:<bus>/<root port>/<address>`
(so the PCIe root is the first component below /sys/devices, which is how
k8s.io/dynamic-resource-allocation/deviceattribute resolves it), and each device directory holds the
files go-nvlib's nvpci reads: vendor, device, class, numa_node, subsystem ids, resource, config.
"""

from __future__ import annotations

import os
import shutil
import struct
from pathlib import Path
from typing import Sequence

from fake_gpus.machine.topology import (
    CLASS_3D_CONTROLLER,
    CLASS_PCI_BRIDGE,
    NVIDIA_VENDOR,
    ROOT_PORT_DEVICE,
    ROOT_PORT_VENDOR,
    PciPlacement,
)

SYSFS_DIR = "sys"
# BAR0 (registers, 16 MiB), BAR1 (framebuffer aperture), BAR3; the other lines of a resource file are empty
_BARS = ((0x0000_0000_9000_0000, 0x0000_0000_90FF_FFFF, 0x40200),
         (0x0000_2000_0000_0000, 0x0000_201F_FFFF_FFFF, 0x14220C),
         (0x0000_2020_0000_0000, 0x0000_2020_01FF_FFFF, 0x14220C))


def _resource_file(index: int) -> str:
    lines = []
    for n in range(13):
        if n in (0, 1, 3):
            start, end, flags = _BARS[(0, 1, 3).index(n)]
            offset = index << 32 if n else index << 24
            lines.append(f"0x{start + offset:016x} 0x{end + offset:016x} 0x{flags:016x}")
        else:
            lines.append(f"0x{0:016x} 0x{0:016x} 0x{0:016x}")
    return "\n".join(lines) + "\n"


def _config_space(vendor: int, device: int, pci_class: int) -> bytes:
    """The first 256 bytes of PCI config space: ids and class code, the rest zero."""
    head = struct.pack("<HHHHBBBB", vendor, device, 0x0006, 0x0010, 0xA1, pci_class & 0xFF,
                       (pci_class >> 8) & 0xFF, (pci_class >> 16) & 0xFF)
    return head + bytes(256 - len(head))


def _write_device(path: Path, vendor: int, device: int, pci_class: int, numa: int,
                  subsystem: int | None, resource: str | None) -> None:
    path.mkdir(parents=True, exist_ok=True)
    files = {"vendor": f"0x{vendor:04x}", "device": f"0x{device:04x}", "class": f"0x{pci_class:06x}",
             "numa_node": str(numa)}
    if subsystem is not None:  # unknown for some boards: left out, as go-nvlib tolerates
        files["subsystem_vendor"] = f"0x{subsystem & 0xFFFF:04x}"
        files["subsystem_device"] = f"0x{subsystem >> 16:04x}"
    for name, text in files.items():
        (path / name).write_text(text + "\n")
    if resource is not None:
        (path / "resource").write_text(resource)
    (path / "config").write_bytes(_config_space(vendor, device, pci_class))


def write_sysfs(root: Path, gpus: Sequence[tuple[PciPlacement, int, int | None]]) -> Path:
    """Write the view under `root`/sys for (placement, NVML pciDeviceId, subsystem id or None) GPUs."""
    sysfs = Path(root) / SYSFS_DIR
    tmp = sysfs.with_name(f"{SYSFS_DIR}.tmp.{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    devices = tmp / "bus" / "pci" / "devices"
    nvidia = tmp / "bus" / "pci" / "drivers" / "nvidia"
    devices.mkdir(parents=True)
    nvidia.mkdir(parents=True)
    (tmp / "devices" / "system").mkdir(parents=True)  # the real one is mounted here (namespace.py)
    for index, (place, pci_device_id, subsystem) in enumerate(gpus):
        port_dir = tmp / "devices" / place.root / place.root_port
        if not (port_dir / "vendor").exists():
            _write_device(port_dir, ROOT_PORT_VENDOR, ROOT_PORT_DEVICE, CLASS_PCI_BRIDGE, place.numa_node, None, None)
            (devices / place.root_port).symlink_to(f"../../../devices/{place.root}/{place.root_port}")
        gpu_dir = tmp / "devices" / place.device_path
        _write_device(gpu_dir, NVIDIA_VENDOR, pci_device_id >> 16, CLASS_3D_CONTROLLER, place.numa_node,
                      subsystem, _resource_file(index))
        (gpu_dir / "driver").symlink_to("../../../../bus/pci/drivers/nvidia")
        (devices / place.address).symlink_to(f"../../../devices/{place.device_path}")
        (nvidia / place.address).symlink_to(f"../../../../devices/{place.device_path}")
    shutil.rmtree(sysfs, ignore_errors=True)
    tmp.rename(sysfs)
    return sysfs

