"""A GPU's place on the PCI tree as a driver reads it from sysfs: PCIe root and NUMA node.

The same reading as NVIDIA's driver (k8s.io/dynamic-resource-allocation/deviceattribute for the root,
go-nvlib's nvpci for numa_node): /sys/bus/pci/devices/<address> links into
/sys/devices/pci<domain>:<bus>/.../<address>, and that first component is the PCIe root. Without the
link (no such sysfs) the attributes are left out, as NVIDIA's driver does.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

DEFAULT_SYSFS = Path("/sys")


@dataclass(frozen=True)
class PciPlace:
    pcie_root: str | None
    numa_node: int | None


def sysfs_address(nvml_bus_id: str) -> str:
    """NVML's "00000000:18:00.0" in sysfs form: "0000:18:00.0"."""
    return nvml_bus_id.lower()[-12:]


def read_place(nvml_bus_id: str, sysfs: Path = DEFAULT_SYSFS) -> PciPlace:
    """PCIe root and NUMA node of the device at `nvml_bus_id`; None for what sysfs does not give."""
    address = sysfs_address(nvml_bus_id)
    link = Path(sysfs) / "bus" / "pci" / "devices" / address
    try:
        target = os.readlink(link)
    except OSError:
        return PciPlace(None, None)
    parts = os.path.normpath(os.path.join("bus/pci/devices", target)).split(os.sep)
    ok = len(parts) > 2 and parts[0] == "devices" and parts[1].startswith("pci") and parts[-1] == address
    try:
        numa: int | None = int((link / "numa_node").read_text().strip())
    except (OSError, ValueError):
        numa = None
    return PciPlace(parts[1] if ok else None, numa if numa is not None and numa >= 0 else None)
