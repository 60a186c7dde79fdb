"""Where a node's GPUs sit on the PCI tree: root complex, root port and NUMA node of each.

A real 8-GPU HGX node has two CPU sockets, each with its own PCIe root complexes and NUMA node, and
half the GPUs on each. The fake keeps that shape: GPUs in the first half of the node (by NVML index)
hang off socket 0's root complex, the rest off socket 1's, each behind a root port of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from fake_gpus.driver.pci import sysfs_address

NVIDIA_VENDOR = 0x10DE
ROOT_PORT_VENDOR = 0x8086  # the CPU's own root ports
ROOT_PORT_DEVICE = 0x352A
CLASS_3D_CONTROLLER = 0x030200
CLASS_PCI_BRIDGE = 0x060400


@dataclass(frozen=True)
class PciPlacement:
    """One GPU's place: its address, the root complex (`pci0000:17`), its root port and NUMA node."""

    address: str  # "0000:18:00.0", the sysfs form (4-digit domain, lower case)
    root: str  # "pci0000:17", what resource.kubernetes.io/pcieRoot names
    root_port: str  # "0000:17:01.0"
    numa_node: int

    @property
    def device_path(self) -> str:
        """Path below /sys/devices, e.g. pci0000:17/0000:17:01.0/0000:18:00.0."""
        return f"{self.root}/{self.root_port}/{self.address}"


def placements(bus_ids: Sequence[str]) -> list[PciPlacement]:
    """PCI placement of each GPU of a node, given NVML bus ids in NVML index order."""
    addresses = [sysfs_address(b) for b in bus_ids]
    half = (len(addresses) + 1) // 2
    out = []
    for index, address in enumerate(addresses):
        socket = 0 if index < half else 1
        first = addresses[0 if socket == 0 else half]
        domain, bus = first[:4], int(first[5:7], 16)
        root_bus = max(bus - 1, 0)
        port = (index if socket == 0 else index - half) + 1
        out.append(PciPlacement(address, f"pci{domain}:{root_bus:02x}", f"{domain}:{root_bus:02x}:{port:02x}.0", socket))
    return out
