"""Subjects to run the suite on: a KWOK test bed of the suite's own with our driver, or an existing cluster.

The KWOK bed is brought up without GPU nodes; the suite then adds the layout's nodes itself and waits
until the driver's slices stop changing, so a driver that never publishes for a node is the checks'
finding (slices.served-api), not a failed `up`.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout, NodeSpec
from testbed.clusters.registry import cluster_for
from testbed.conformance.subject import Subject

QUIET = 3.0  # seconds without a slice change that count as settled
SETTLE_LIMIT = 60.0


def wait_published(subject: Subject, nodes: list[str], limit: float = SETTLE_LIMIT) -> None:
    """Until every node has a slice of the driver, or the driver's slices stopped changing for QUIET seconds."""
    deadline = time.monotonic() + limit
    last, quiet_since = None, time.monotonic()
    while time.monotonic() < deadline:
        slices = subject.resource.list_resource_slice().items
        mine = [s for s in slices if s.spec.driver == subject.driver]
        if set(nodes) <= {s.spec.node_name for s in mine}:
            return
        state = sorted((s.metadata.name, s.metadata.resource_version) for s in mine)
        if state != last:
            last, quiet_since = state, time.monotonic()
        elif time.monotonic() - quiet_since > QUIET and mine:
            return
        time.sleep(0.2)


def _add_node(api: client.ApiClient, node: NodeSpec) -> None:
    from testbed.clusters.kwok import node_object

    try:
        client.CoreV1Api(api).create_node(body=node_object(node))
    except ApiException as exc:
        if exc.status != 409:
            raise


@contextmanager
def kwok_bed(layout: Layout, k8s: str, driver: str, env: dict[str, str] | None = None, keep: bool = False) -> Iterator[tuple[Subject, Path]]:
    """A fresh KWOK cluster running our driver (with `env`: fault switches) and the layout's GPU nodes."""
    name = f"conf-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kwok", name)
    env = dict(env or {})
    try:
        our_driver = DriverSpec(name=driver, env=env)
        kubeconfig = cluster.create(ClusterSpec(name=name, k8s=k8s, layout=Layout((), name=layout.name), driver=our_driver))
        api = cluster.api_client()

        def restart() -> None:
            cluster.deploy_driver(our_driver)

        subject = Subject(api, driver, "kwok", layout, restart_driver=restart, add_node=lambda n: _add_node(api, n))
        for node in layout.nodes:
            _add_node(api, node)
        wait_published(subject, [n.name for n in layout.nodes])
        try:
            yield subject, kubeconfig
        finally:
            api.close()
    finally:
        if not keep:
            cluster.delete()


@contextmanager
def existing_bed(kubeconfig: str, driver: str, layout: Layout | None = None) -> Iterator[tuple[Subject, Path]]:
    """The cluster behind `kubeconfig`, as it is: no node control, no driver restarts."""
    api = config.new_client_from_config(config_file=kubeconfig)
    try:
        yield Subject(api, driver, "existing", layout), Path(kubeconfig)
    finally:
        api.close()
