"""A throwaway cluster for a campaign outside pytest (the benchmark): up with the driver's faults, a session
on it, down afterwards whatever happens."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fake_gpus.driver.faults import fault_env
from testbed.campaign.session import Session, kwok_session
from testbed.beds import bed_session
from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout
from testbed.clusters.registry import cluster_for


@contextmanager
def campaign_cluster(backend: str, layout: Layout, faults: list[str], name: str, k8s: str, restart_backoff_max: float | None = None,
                     logs_to: Path | None = None, **campaign_args) -> Iterator[Session]:
    """`restart_backoff_max` caps the kind kubelets' crash-loop back-off (None: the kubelet's 5 min). With `logs_to`,
    the cluster's logs (components, kubelets, driver) are exported there before it goes, so that a failed seed
    can be read afterwards (not after an interrupt: Ctrl-C removes the cluster at once)."""
    cluster = cluster_for(backend, f"campaign-{name}"[:40].rstrip("-"))
    spec = ClusterSpec(name=cluster.name, k8s=k8s, layout=layout, driver=DriverSpec(env=fault_env(faults)),
                       restart_backoff_max=restart_backoff_max)
    # two tries: a loaded machine has been seen to lose a component during `up` (a refusal is not tried again)
    with bed_session(spec, cluster, attempts=2, logs_to=logs_to / cluster.name if logs_to is not None else None, client=None):
        if backend == "kwok":
            with kwok_session(cluster, layout, faults, label=name, **campaign_args) as session:
                yield session
        else:
            from testbed.campaign.kind import kind_session

            with kind_session(cluster, layout, faults, label=name, **campaign_args) as session:
                yield session
