"""A throwaway cluster for a campaign outside pytest (the benchmark): up with the driver's faults, a session
on it, down afterwards whatever happens."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from fake_gpus.driver.faults import fault_env
from testbed.campaign.session import Session, kwok_session
from testbed.clusters.base import ClusterSpec, ClusterStartError
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
        if logs_to is not None:
            _export_logs(cluster, logs_to / cluster.name)
    finally:
        cluster.delete()


def _export_logs(cluster, folder: Path) -> None:
    try:
        print(f"campaign: logs of {cluster.name} in {cluster.export_logs(folder)}")
    except Exception as exc:  # noqa: BLE001 - the logs are evidence, not the verdict: a failed export must not replace it
        print(f"campaign: could not export the logs of {cluster.name}: {type(exc).__name__}: {exc}")
