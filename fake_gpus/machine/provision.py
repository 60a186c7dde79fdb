"""Make a simulated node's hardware: its GPUs (fake-NVML state), its OS views and, if asked, a static MIG layout.

What a node is before any driver runs on it; the same for our driver and NVIDIA's. A static MIG layout
is created through NVML, as an admin's MIG manager would, before the driver starts. `provision` is the
one path from a node's hardware contract (fake_gpus.node) to its machine, for KWOK (the publisher
process), kind (the host, before the node boots), replay and the suites; it reads the catalog (boards,
named layouts), which the driver never does.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Mapping

from fake_gpus.catalog import BOARD_KEYS, Board, get_board
from fake_gpus.machine.views import MachineViews, ensure_machine
from fake_gpus.node import NodeHardware, hardware_labels
from fake_gpus.nvml import state

PRODUCT_LABEL = "nvidia.com/gpu.product"


class ProvisionError(ValueError):
    """Hardware that cannot be provisioned; one line naming what was wrong and what is valid."""


def usable_layouts(board: Board) -> dict[str, dict[str, int]]:
    """Named MIG layouts of `board` whose every profile NVML answers for (all facts known)."""
    complete = {p.name for p in board.gpu_instance_profiles if p.complete}
    return {name: dict(layout) for name, layout in board.mig_layouts.items() if set(layout) <= complete}


def check_hardware(hardware: NodeHardware) -> Board:
    """The board of `hardware` if it can be provisioned: a known board and, for static MIG, a usable layout."""
    if hardware.board not in BOARD_KEYS:
        raise ProvisionError(f"unknown board {hardware.board!r}; valid boards: {', '.join(BOARD_KEYS)}")
    board = get_board(hardware.board)
    if hardware.mode.kind == "static-mig":
        name = hardware.mode.mig_layout
        usable = usable_layouts(board)
        if name not in usable:
            problem = "uses MIG profiles whose facts are unknown" if name in board.mig_layouts else "is unknown"
            raise ProvisionError(f"MIG layout {name!r} of {board.key} {problem}; valid layouts: {', '.join(usable) or 'none'}")
    return board


def node_labels(hardware: NodeHardware) -> dict[str, str]:
    """Every label a node with `hardware` carries: the contract's, plus the product name GPU operators set."""
    board = check_hardware(hardware)
    return {**hardware_labels(hardware), PRODUCT_LABEL: board.product_name.replace(" ", "-")}


def provision_node(state_dir: Path, board: str, count: int, mig_layout: Mapping[str, int] | None = None,
                   nvml=None) -> MachineViews:
    """Create (or keep) the node at `state_dir` with `count` x `board`; apply `mig_layout` through `nvml`."""
    state.create_state_dir(state_dir, [(board, count)])
    views = ensure_machine(state_dir)
    if mig_layout is not None:
        from fake_gpus.driver import miglayout  # the admin's tool talks NVML like any other

        with nvml.session(state_dir):
            miglayout.apply_layout(mig_layout)
    return views


def provision(state_dir: Path, hardware: NodeHardware, *, nvml=None, fresh: bool = False) -> MachineViews:
    """Make `state_dir` hold `hardware` (checked first: nothing is made for hardware that cannot be): its
    GPUs and OS views, kept as they are if already there unless `fresh`, and in static-MIG mode its layout
    (left alone when already in place, so a restarted publisher keeps its MIG UUIDs)."""
    board = check_hardware(hardware)
    if fresh:
        shutil.rmtree(state_dir, ignore_errors=True)
    layout = usable_layouts(board)[hardware.mode.mig_layout] if hardware.mode.kind == "static-mig" else None
    if layout is not None and nvml is None:
        from fake_gpus.driver.nvml_adapter import NvmlLibrary
        from fake_gpus.nvml.build import SONAME, ensure_library

        nvml = NvmlLibrary(ensure_library() / SONAME)
    return provision_node(state_dir, hardware.board, hardware.count, layout, nvml)
