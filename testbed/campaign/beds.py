"""A throwaway cluster for a campaign outside pytest (the benchmark): up with the driver's faults, a session
on it, down afterwards whatever happens."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from fake_gpus.driver.faults import fault_env
from testbed.campaign.session import Session, kwok_session
from testbed.clusters.base import ClusterSpec, ClusterStartError
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout
from testbed.clusters.registry import cluster_for


@contextmanager
def campaign_cluster(backend: str, layout: Layout, faults: list[str], name: str, k8s: str, restart_backoff_max: float | None = None,
                     **campaign_args) -> Iterator[Session]:
    """`restart_backoff_max` caps the kind kubelets' crash-loop back-off (None: the kubelet's 5 min)."""
    cluster = cluster_for(backend, f"campaign-{name}"[:40].rstrip("-"))
    spec = ClusterSpec(name=cluster.name, k8s=k8s, layout=layout, driver=DriverSpec(env=fault_env(faults)),
                       restart_backoff_max=restart_backoff_max)
    try:
        cluster.create(spec, force=True)
    except ClusterStartError as exc:  # a loaded machine has been seen to lose a component during `up`: once more
        # (only then: a refusal before anything started -- a host without docker, a node image that does not
        # build -- fails the same way again)
        print(f"campaign: retrying {backend} cluster {cluster.name} after: {exc}")
        cluster.create(spec, force=True)
    try:
        if backend == "kwok":
            with kwok_session(cluster, layout, faults, label=name, **campaign_args) as session:
                yield session
        else:
            from testbed.campaign.kind import kind_session

            with kind_session(cluster, layout, faults, label=name, **campaign_args) as session:
                yield session
    finally:
        cluster.delete()
