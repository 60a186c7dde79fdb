"""Backend name -> cluster class."""

from __future__ import annotations

from testbed.clusters.base import Cluster
from testbed.errors import UnknownNameError
from testbed.clusters.kwok import KwokCluster

BACKENDS: dict[str, type[Cluster]] = {"kwok": KwokCluster}


def cluster_for(backend: str, name: str) -> Cluster:
    """The cluster object for `backend` and `name`; ValueError naming the valid backends otherwise."""
    if backend not in BACKENDS:
        raise UnknownNameError(f"unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    return BACKENDS[backend](name)
