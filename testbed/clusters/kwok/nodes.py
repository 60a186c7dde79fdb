"""The Node objects of a KWOK cluster: one per layout node, kept Ready by the KWOK controller."""

from __future__ import annotations

from fake_gpus.catalog import get_board
from fake_gpus.driver.publisher import LAYOUT_LABEL
from testbed.clusters.layout import NodeSpec


def node_object(node: NodeSpec) -> dict:
    """The Node a KWOK controller will keep Ready: labelled with its board so tests can find it."""
    board = get_board(node.board)
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": node.name,
            # kwokctl's controller manages nodes carrying this annotation
            "annotations": {"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {
                "type": "kwok",
                "kubernetes.io/hostname": node.name,
                "kubernetes.io/os": "linux",
                "kubernetes.io/arch": "amd64",
                "dra-testbed.io/board": node.board,
                "dra-testbed.io/gpu-count": str(node.count),
                "dra-testbed.io/mode": node.mode.kind,
                "nvidia.com/gpu.product": board.product_name.replace(" ", "-"),
                # the publisher reads the node's GPUs and mode from these labels
                **({LAYOUT_LABEL: node.mode.mig_layout} if node.mode.mig_layout else {}),
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"},
            "capacity": {"cpu": "128", "memory": "1Ti", "pods": "110"},
        },
    }
