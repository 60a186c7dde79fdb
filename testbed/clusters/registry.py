"""Backend name -> cluster class: the one list of backends (the CLI's and the pytest options' choices)."""

from __future__ import annotations

import importlib

from testbed.clusters.base import Cluster
from testbed.errors import UnknownNameError

# module:class per backend, imported on first use so that `dra-testbed --help` loads no backend
_BACKENDS = {"kwok": "testbed.clusters.kwok.cluster:KwokCluster", "kind": "testbed.clusters.kind.cluster:KindCluster"}
EXISTING = "existing"  # a cluster someone else runs, reached by --kubeconfig
BACKENDS: tuple[str, ...] = tuple(_BACKENDS)  # the backends dra-testbed brings up itself


def backend_class(backend: str) -> type[Cluster]:
    """The class of a backend dra-testbed brings up; UnknownNameError naming the valid ones otherwise."""
    if backend not in _BACKENDS:
        raise UnknownNameError(f"unknown backend {backend!r}; valid: {', '.join([*BACKENDS, EXISTING])}")
    module, name = _BACKENDS[backend].split(":")
    return getattr(importlib.import_module(module), name)


def cluster_for(backend: str, name: str, kubeconfig: str | None = None) -> Cluster:
    """The cluster object for `backend` and `name`; UnknownNameError naming the valid backends otherwise.

    The `existing` backend is the cluster behind `kubeconfig`, which dra-testbed never starts or stops.
    """
    if backend == EXISTING:
        from testbed.clusters.existing import ExistingCluster

        return ExistingCluster(name, kubeconfig)
    return backend_class(backend)(name)
