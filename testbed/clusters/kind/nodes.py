"""The nodes of a kind cluster: what each worker carries (labels, mounts) and its simulated GPUs."""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from fake_gpus.catalog import get_board
from fake_gpus.nvml.state import create_state_dir
from testbed.clusters.base import ClusterError
from testbed.clusters.layout import NodeSpec

NVML_STATE_IN_NODE = "/var/lib/dra-testbed/nvml"
NVML_LIB_IN_NODE = "/opt/dra-testbed/nvml"


@dataclass(frozen=True)
class Mount:
    host: str
    container: str
    readonly: bool = False


@dataclass
class KindNode:
    """One node of the kind config; `layout` names the layout node a worker stands for."""

    role: str
    index: int
    layout: NodeSpec | None = None
    labels: dict[str, str] = field(default_factory=dict)
    mounts: list[Mount] = field(default_factory=list)


def node_labels(node: NodeSpec) -> dict[str, str]:
    """Labels a GPU worker carries, the same keys the KWOK backend uses, plus the layout name."""
    board = get_board(node.board)
    labels = {
        "dra-testbed.io/layout-node": node.name,
        "dra-testbed.io/board": node.board,
        "dra-testbed.io/gpu-count": str(node.count),
        "dra-testbed.io/mode": node.mode.kind,
        "nvidia.com/gpu.product": board.product_name.replace(" ", "-"),
    }
    if node.mode.mig_layout:
        labels["dra-testbed.io/mig-layout"] = node.mode.mig_layout
    return labels


def provision_state(state: Path, node: NodeSpec) -> None:
    """The node's simulated GPUs: a fresh state directory, with its static MIG layout made through NVML."""
    shutil.rmtree(state, ignore_errors=True)
    create_state_dir(state, [(node.board, node.count)])
    if node.mode.kind == "static-mig":
        from fake_gpus.driver import miglayout
        from fake_gpus.driver.inventory import NvmlLibrary
        from fake_gpus.nvml.build import SONAME, ensure_library

        layouts = get_board(node.board).mig_layouts
        if node.mode.mig_layout not in layouts:
            raise ClusterError(f"node {node.name}: no MIG layout {node.mode.mig_layout!r} for {node.board}; valid: {', '.join(layouts)}")
        with NvmlLibrary(ensure_library() / SONAME).session(state):
            miglayout.apply_layout(dict(layouts[node.mode.mig_layout]))


def nvml_library() -> Path:
    """Host directory of the fake libnvidia-ml.so.1, mounted into every GPU node (CDI hands it on)."""
    from fake_gpus.nvml.build import ensure_library

    return ensure_library()
