"""KWOK backend: a real control plane from local binaries, simulated GPU nodes (cluster.py), their Node
objects (nodes.py)."""

from testbed.clusters.kwok.cluster import BINARIES, KwokCluster
from testbed.clusters.kwok.nodes import node_object

__all__ = ["BINARIES", "KwokCluster", "node_object"]
