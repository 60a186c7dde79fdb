"""The nodes of a kind cluster: what each worker carries (labels, mounts) and its simulated GPUs."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fake_gpus.machine.provision import ProvisionError, provision
from fake_gpus.machine.provision import node_labels as hardware_labels
from fake_gpus.nvml.state import NODE_STATE_DIR
from testbed.clusters.base import ClusterError
from testbed.clusters.layout import NodeSpec

NVML_STATE_IN_NODE = NODE_STATE_DIR  # where the fake NVML looks when FAKE_NVML_STATE_DIR is unset
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
    return {"dra-testbed.io/layout-node": node.name, **hardware_labels(node.hardware)}


def provision_state(state: Path, node: NodeSpec) -> None:
    """The node's simulated GPUs: a fresh state directory, with its static MIG layout made through NVML."""
    try:
        provision(state, node.hardware, fresh=True)
    except ProvisionError as exc:
        raise ClusterError(f"node {node.name}: {exc}") from exc


def nvml_library() -> Path:
    """Host directory of the fake libnvidia-ml.so.1, mounted into every GPU node (CDI hands it on)."""
    from fake_gpus.nvml.build import ensure_library

    return ensure_library()


def gpu_minors(state: Path) -> list[int]:
    """Minors of the GPUs provisioned in the node state directory `state`."""
    from fake_gpus.nvml.state import validate_state_dir

    return [g.minor for g in validate_state_dir(state)[0]]
