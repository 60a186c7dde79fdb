"""Backend name -> cluster class: the one list of backends (the CLI's and the pytest options' choices), and
clusters found by name whatever their backend."""

from __future__ import annotations

import importlib

import testbed.drivers  # noqa: F401 - registers every driver under test: any backend reached from here can run them
from testbed.clusters.base import DEFAULT_NAME, Cluster, ClusterError
from testbed.errors import BadInputError, UnknownNameError

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


class ClusterNotFound(ClusterError):
    """No cluster of a name among the backends looked at; `existing` says which clusters there are instead."""

    def __init__(self, name: str, backend: str | None, existing: list[Cluster]) -> None:
        self.missing = f"no {backend + ' ' if backend else ''}cluster named {name!r}"
        listing = ", ".join(f"{c.name} ({c.backend})" for c in existing)
        self.existing = f"the clusters that exist: {listing}" if listing else "no cluster exists"
        super().__init__(f"{self.missing}; {self.existing}")


class AmbiguousClusterName(BadInputError):
    """Clusters of one name in two backends: which one is meant has to be said (--backend)."""


def find_clusters(name: str, backend: str | None = None) -> list[Cluster]:
    """The clusters named `name` in every backend dra-testbed brings up (only in `backend` when given), as
    each backend's exists() sees them; UnknownNameError for a backend that is not one of them."""
    backends = [backend] if backend else list(_BACKENDS)
    return [cluster for cluster in (backend_class(b)(name) for b in backends) if cluster.exists()]


def known_clusters() -> list[Cluster]:
    """Every cluster some backend keeps state for, by backend, then name."""
    found: list[Cluster] = []
    for backend in _BACKENDS:
        cls = backend_class(backend)
        folder = cls(DEFAULT_NAME).home.parent  # a cluster's home is <state>/clusters/<backend>/<name>
        names = sorted(p.name for p in folder.iterdir() if p.is_dir()) if folder.is_dir() else []
        found += [cluster for cluster in map(cls, names) if cluster.exists()]
    return found


def cluster_named(name: str, backend: str | None = None) -> Cluster:
    """The one cluster named `name` (in `backend` when given). ClusterNotFound listing the clusters that exist
    when there is none; AmbiguousClusterName when two backends hold that name and `backend` does not say which."""
    found = find_clusters(name, backend)
    if len(found) > 1:
        choices = " or ".join(f"--backend {c.backend}" for c in found)
        raise AmbiguousClusterName(f"clusters named {name!r} exist in {' and '.join(c.backend for c in found)}; "
                                   f"say which with {choices}")
    if not found:
        raise ClusterNotFound(name, backend, known_clusters())
    return found[0]
