"""The Node objects of a KWOK cluster: one per layout node, kept Ready by the KWOK controller."""

from __future__ import annotations

from fake_gpus.machine.provision import node_labels
from testbed.clusters.layout import NodeSpec


def node_object(node: NodeSpec) -> dict:
    """The Node a KWOK controller will keep Ready: labelled with its board so tests can find it."""
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
                # the publisher reads the node's GPUs and mode from these labels
                **node_labels(node.hardware),
            },
        },
        "spec": {},
        "status": {
            "allocatable": {"cpu": "128", "memory": "1Ti", "pods": "110"},
            "capacity": {"cpu": "128", "memory": "1Ti", "pods": "110"},
        },
    }
