"""Subjects to run the suite on: a KWOK or kind test bed of the suite's own, or an existing cluster.

With our driver the KWOK bed is brought up without GPU nodes; the suite then adds the layout's nodes
itself and waits until the driver's slices stop changing, so a driver that never publishes for a node is
the checks' finding (slices.served-api), not a failed `up`. A vendor's binary on KWOK needs its nodes at
`up` (a plugin process per node), so that bed has no node control. The kind bed runs the driver as
DaemonSets on real kubelets; the suite may restart, roll and pause them (driver_control) and runs its
workload image in pods to read NVML there. Every bed's API client retries what a loaded control plane
drops (refused or cut connections, 429/5xx: testbed.kube.apiretry), so only the driver's answers are findings.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.node.driver_root import DRIVER_ROOT_DIR
from fake_gpus.nvml.state import NODE_STATE_DIR
from testbed.kube.apiretry import retrying_client
from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout, NodeSpec
from testbed.clusters.registry import cluster_for
from testbed.conformance.subject import Subject

QUIET = 3.0  # seconds without a slice change that count as settled
KUBELET_WIPE_DELAY = 30.0  # pkg/kubelet/cm/dra: a gone plugin's slices are deleted after this long
SETTLE_LIMIT = 60.0
# a kind GPU worker's driver root: in its fake-GPU state directory (fake_gpus/node/driver_root.py)
KIND_DRIVER_ROOT = f"{NODE_STATE_DIR}/{DRIVER_ROOT_DIR}"


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
def kwok_bed(layout: Layout, k8s: str, driver: str | DriverSpec, env: dict[str, str] | None = None,
             keep: bool = False) -> Iterator[tuple[Subject, Path]]:
    """A fresh KWOK cluster running `driver` (a name: our driver under it; with `env`: fault switches) and
    the layout's GPU nodes."""
    name = f"conf-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kwok", name)
    spec = (driver if isinstance(driver, DriverSpec) else DriverSpec(name=driver)).with_env(dict(env or {}))
    ours = spec.kind == "ours"
    try:
        up_layout = Layout((), name=layout.name) if ours else layout
        kubeconfig = cluster.create(ClusterSpec(name=name, k8s=k8s, layout=up_layout, driver=spec))
        api = retrying_client(str(kubeconfig))

        def restart() -> None:
            cluster.deploy_driver(spec)

        subject = Subject(api, spec.name, "kwok", layout, restart_driver=restart,
                          add_node=(lambda n: _add_node(api, n)) if ours else None)
        for node in layout.nodes if ours else ():
            _add_node(api, node)
        wait_published(subject, [n.name for n in layout.nodes])
        try:
            yield subject, kubeconfig
        finally:
            api.close()
    finally:
        if not keep:
            cluster.delete()


def _kind_layout(api: client.ApiClient, layout: Layout) -> Layout:
    """The layout with each node named as its kind worker is (kind names nodes after containers)."""
    from dataclasses import replace

    labelled = {n.metadata.labels.get("dra-testbed.io/layout-node"): n.metadata.name
                for n in client.CoreV1Api(api).list_node(label_selector="dra-testbed.io/layout-node").items}
    return Layout(tuple(replace(n, name=labelled.get(n.name, n.name)) for n in layout.nodes), name=layout.name)


@contextmanager
def kind_bed(layout: Layout, k8s: str, driver: DriverSpec, name: str | None = None,
             keep: bool = False) -> Iterator[tuple[Subject, Path]]:
    """A kind cluster (named `name`, default a random conf-kind-*) with `driver` on the layout's GPU
    workers and our workload image loaded into them: brought up and torn down afterwards (unless `keep`),
    or, when one of that name runs with the same minor, layout and driver, reused and left as found."""
    from testbed.clusters.base import ClusterError, spec_mismatch

    name = name or f"conf-kind-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kind", name)
    spec = ClusterSpec(name=name, k8s=k8s, layout=layout, driver=driver)
    reused = cluster.exists()
    if reused:  # a bed of this name runs already (e.g. from --keep-cluster): used as it is, left as found
        mismatch = spec_mismatch(cluster.saved_spec(), spec)
        if mismatch or not cluster.status().running:
            raise ClusterError(f"a kind cluster named {name!r} exists but cannot be reused: "
                               f"{mismatch or 'it does not run'}; use another --name or `dra-testbed down --backend kind --name {name}`")
    try:
        kubeconfig = cluster.kubeconfig() if reused else cluster.create(spec)
        subject = kind_subject(cluster, layout, driver.name)
        try:
            yield subject, kubeconfig
        finally:
            subject.api.close()
    finally:
        if not (keep or reused):
            cluster.delete()


def kind_subject(cluster, layout: Layout, driver: str) -> Subject:
    """The subject of a running kind cluster of the suite's own: our workload image loaded into its
    workers, and the driver's DaemonSets under the suite's control."""
    from testbed.clusters.kind.images.driver_image import ensure_workload_image
    from testbed.conformance import driver_control

    workload = ensure_workload_image()
    cluster.load_images(workload, workers_only=True)
    api = retrying_client(str(cluster.kubeconfig()))
    nodes = [n.name for n in _kind_layout(api, layout).nodes]

    def settled(action):
        """`action`, then past the kubelet's wipe of a gone plugin's slices (30 s after it went, unless it
        was usable again by then) and until every node publishes again: what happens to the slices meanwhile
        is stable-restart's finding, the checks after it get a published driver."""
        def run() -> None:
            action()
            time.sleep(KUBELET_WIPE_DELAY + 5)
            deadline = time.monotonic() + SETTLE_LIMIT  # a node left without slices is the checks' finding
            while not set(nodes) <= {s["spec"].get("nodeName") for s in subject.slices()} and time.monotonic() < deadline:
                time.sleep(1)
        return run

    subject = Subject(api, driver, "kind", _kind_layout(api, layout), workload_image=workload, driver_root=KIND_DRIVER_ROOT,
                      restart_driver=settled(lambda: driver_control.restart_pods(api)),
                      roll_driver=settled(lambda: driver_control.roll_out(api)),
                      pause_driver=lambda: driver_control.paused(api))
    wait_published(subject, nodes)
    return subject


@contextmanager
def existing_bed(kubeconfig: str, driver: str, layout: Layout | None = None) -> Iterator[tuple[Subject, Path]]:
    """The cluster behind `kubeconfig`, as it is: no node control, no driver restarts."""
    api = retrying_client(kubeconfig)
    try:
        yield Subject(api, driver, "existing", layout), Path(kubeconfig)
    finally:
        api.close()
