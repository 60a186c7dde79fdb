"""Write every view of a node (driver root, /proc, /sys) into its fake-NVML state directory."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from fake_gpus.catalog import get_board
from fake_gpus.machine.driver_root import write_driver_root
from fake_gpus.machine.procfs import PROC_DEVICES, PROC_DRIVER, write_procfs
from fake_gpus.machine.sysfs import SYSFS_DIR, write_sysfs
from fake_gpus.machine.topology import placements
from fake_gpus.node.driver_root import DRIVER_ROOT_DIR
from fake_gpus.nvml import state


@dataclass(frozen=True)
class MachineViews:
    """Paths of one node's views; `namespace.wrap` mounts them where a process looks."""

    state_dir: Path

    @property
    def driver_root(self) -> Path:
        return self.state_dir / DRIVER_ROOT_DIR

    @property
    def proc_driver(self) -> Path:
        return self.state_dir / PROC_DRIVER

    @property
    def proc_devices(self) -> Path:
        return self.state_dir / PROC_DEVICES

    @property
    def sysfs(self) -> Path:
        return self.state_dir / SYSFS_DIR


def ensure_machine(state_dir: Path) -> MachineViews:
    """(Re)write the views of the node at `state_dir` (a fake-NVML state directory) and return them."""
    path = Path(state_dir)
    gpus, mig = state.validate_state_dir(path)
    boards = [get_board(g.board) for g in gpus]
    versions = {b.driver_version for b in boards}
    if len(versions) != 1:
        raise state.StateError(f"{path}: GPUs of driver versions {sorted(versions)}; one node runs one driver")
    write_driver_root(path, versions.pop(), [g.minor for g in gpus])
    write_procfs(path, [g.minor for g in gpus])
    places = placements([g.bus_id for g in gpus])
    write_sysfs(path, [(p, b.pci_device_id, b.pci_subsystem_id) for p, b in zip(places, boards)])
    state.refresh_capabilities(path)  # a state directory older than the capability files gets them
    return MachineViews(path)
