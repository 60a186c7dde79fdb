"""Backend name -> cluster class."""

from __future__ import annotations

from testbed.clusters.base import Cluster
from testbed.clusters.existing import ExistingCluster
from testbed.errors import UnknownNameError
from testbed.clusters.kind import KindCluster
from testbed.clusters.kwok import KwokCluster

BACKENDS: dict[str, type[Cluster]] = {"kwok": KwokCluster, "kind": KindCluster}


def cluster_for(backend: str, name: str, kubeconfig: str | None = None) -> Cluster:
    """The cluster object for `backend` and `name`; UnknownNameError naming the valid backends otherwise.

    The `existing` backend is the cluster behind `kubeconfig`, which dra-testbed never starts or stops.
    """
    if backend == "existing":
        return ExistingCluster(name, kubeconfig)
    if backend not in BACKENDS:
        raise UnknownNameError(f"unknown backend {backend!r}; valid: {', '.join([*BACKENDS, 'existing'])}")
    return BACKENDS[backend](name)
