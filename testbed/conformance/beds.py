"""Subjects to run the suite on: a KWOK or kind test bed of the suite's own, or an existing cluster.

With our driver the KWOK bed is brought up without GPU nodes; the suite then adds the layout's nodes
itself and waits until the driver's slices stop changing, so a driver that never publishes for a node is
the checks' finding (slices.served-api), not a failed `up`. A vendor's binary on KWOK needs its nodes at
`up` (a plugin process per node), so that bed has no node control. The kind bed runs the driver as
DaemonSets on real kubelets; the suite may restart, roll and pause them and runs its workload image in
pods to read NVML there. What the suite may do to a bed is what its backend can (subject_of); every bed goes
through the one life cycle of testbed.beds. Every bed's API client retries what a loaded control plane drops
(refused or cut connections, 429/5xx: testbed.kube.apiretry), so only the driver's answers are findings.
"""

from __future__ import annotations

import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from kubernetes import client

from fake_gpus.node.driver_root import DRIVER_ROOT_DIR
from fake_gpus.nvml.state import NODE_STATE_DIR
from testbed.beds import bed_session
from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout
from testbed.conformance.subject import Subject, subject_of
from testbed.kube.apiretry import retrying_client

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


@contextmanager
def kwok_bed(layout: Layout, k8s: str, driver: str | DriverSpec, env: dict[str, str] | None = None,
             keep: bool = False) -> Iterator[tuple[Subject, Path]]:
    """A fresh KWOK cluster running `driver` (a name: our driver under it; with `env`: fault switches) and
    the layout's GPU nodes: added by the suite after `up` where the driver follows nodes (node control)."""
    from testbed.clusters.kwok import KwokCluster
    from testbed.clusters.kwok.driver import kwok_driver
    from testbed.workloads.physical_watch import kwok_state_dirs

    name = f"conf-{uuid.uuid4().hex[:6]}"
    cluster = KwokCluster(name)
    spec = (driver if isinstance(driver, DriverSpec) else DriverSpec(name=driver)).with_env(dict(env or {}))
    late_nodes = cluster.follows_nodes(spec)
    up_layout = Layout((), name=layout.name) if late_nodes else layout
    with bed_session(ClusterSpec(name=name, k8s=k8s, layout=up_layout, driver=spec), cluster, keep=keep, client="retrying") as bed:
        subject = subject_of(bed.cluster, bed.api, spec.name, layout)
        subject.node_nvml = kwok_state_dirs(bed.cluster.home)  # whichever driver serves them
        if late_nodes:  # node.nvml-state prepares on a dynamic-MIG node only once the checks before it are done
            by_name = {n.name: n for n in layout.nodes}
            subject.serve_node = lambda node: kwok_driver(spec).join(bed.cluster.home, bed.kubeconfig, by_name[node])
        for node in layout.nodes if late_nodes else ():
            if node.mode.shares:  # its plugin joins the stand-in kubelet, which prepares claims there: node.time-slicing
                kwok_driver(spec).join(bed.cluster.home, bed.kubeconfig, node)
            subject.add_node(node)
        wait_published(subject, [n.name for n in layout.nodes])
        yield subject, bed.kubeconfig


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
    name = name or f"conf-kind-{uuid.uuid4().hex[:6]}"
    with bed_session(ClusterSpec(name=name, k8s=k8s, layout=layout, driver=driver), "kind", reuse=True, keep=keep, client=None) as bed:
        subject = kind_subject(bed.cluster, layout, driver.name)
        try:
            yield subject, bed.kubeconfig
        finally:
            subject.api.close()


def kind_subject(cluster, layout: Layout, driver: str) -> Subject:
    """The subject of a running kind cluster of the suite's own: our workload image loaded into its
    workers, and the driver's DaemonSets under the suite's control."""
    from testbed.clusters.kind.images.driver_image import ensure_workload_image

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

    subject = subject_of(cluster, api, driver, _kind_layout(api, layout), around=settled, workload_image=workload,
                         driver_root=KIND_DRIVER_ROOT)
    wait_published(subject, nodes)
    return subject


@contextmanager
def existing_bed(kubeconfig: str, driver: str, layout: Layout | None = None) -> Iterator[tuple[Subject, Path]]:
    """The cluster behind `kubeconfig`, as it is (checked to serve DRA): no node control, no driver restarts."""
    with bed_session(ClusterSpec(name="existing", layout=layout), "existing", kubeconfig=kubeconfig, client="retrying") as bed:
        # no layout given: the fleet `dra-testbed install` put there, if any
        yield subject_of(bed.cluster, bed.api, driver, bed.cluster.layout_or_installed(layout)), bed.kubeconfig
