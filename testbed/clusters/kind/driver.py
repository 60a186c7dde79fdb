"""What a driver implements to run on a kind cluster's GPU workers.

A driver here is DaemonSets on real kubelets, in a namespace of its own: ours (testbed/drivers/ours) from
our driver image, NVIDIA's (testbed/drivers/nvidia) as its chart deploys it. Each registered driver
(testbed.clusters.driver) names its `KindDriver` class for the "kind" backend; deploying one retires
every other, as two drivers must not manage one node's GPUs.
"""

from __future__ import annotations

import abc
import subprocess
import time
from pathlib import Path
from typing import Protocol

from kubernetes import client

from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec, DriverSpecError, implementations, unsupported
from testbed.clusters.driver_identity import DRIVER_NAMESPACE
from testbed.clusters.layout import Layout

READY_TIMEOUT = 300.0
POLL_SECONDS = 0.25  # up returns this much after the driver is ready, at worst


class KindCluster(Protocol):
    """What a driver uses of a running kind cluster (testbed.clusters.kind.cluster.KindCluster)."""

    home: Path

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120, kubeconfig: Path | None = None) -> subprocess.CompletedProcess: ...

    def node_containers(self) -> list[str]: ...

    def load_images(self, *references: str, workers_only: bool = False) -> None: ...

    def api_client(self) -> client.ApiClient: ...


class KindDriver(abc.ABC):
    """How one driver is deployed on a running kind cluster."""

    runs: tuple[str, ...] = ()  # the ways of running it (DriverSpec.way) this class takes
    namespace = DRIVER_NAMESPACE  # where its DaemonSets run

    def __init__(self, spec: DriverSpec) -> None:
        if spec.way not in self.runs:
            raise DriverSpecError(unsupported("kind", spec, self.runs))
        self.spec = spec

    def preflight(self) -> None:
        """Refuse (DriverSpecError, one line) a driver that cannot be deployed, before the cluster is made;
        the Docker engine runs by then."""

    def image(self, minor: str) -> str | None:
        """The image `deploy` runs (built if it must be), so the workers can boot holding it (worker_image.py); None: no image."""
        return None

    early_apply = False  # whether `apply` may run while kind still joins the workers (early_deploy.py)

    def apply(self, cluster: KindCluster, layout: Layout, minor: str, kubeconfig: Path | None = None) -> None:
        """Apply the driver's manifests with `kubeconfig`, without waiting for anything (drivers with `early_apply`)."""
        raise NotImplementedError(f"{type(self).__name__} is deployed whole, by deploy()")

    @abc.abstractmethod
    def deploy(self, cluster: KindCluster, layout: Layout, minor: str) -> None:
        """Deploy (or redeploy) on the GPU workers and return once every layout node has its slices."""

    def retire_others(self, cluster: KindCluster) -> None:
        """Remove every other registered driver deployed on `cluster` (see retire)."""
        for other in {cls.namespace for cls in implementations("kind")} - {self.namespace}:
            self.retire(cluster, other)

    def retire(self, cluster: KindCluster, namespace: str) -> None:
        """Remove another driver deployed in `namespace`, if there is one, with its kubelet-plugin files on
        the workers: both drivers may carry one name, and a plugin refuses the other's checkpoint."""
        if cluster.kubectl("get", "namespace", namespace, check=False).returncode != 0:
            return
        from testbed.host.docker.dockerd import docker

        try:
            cluster.kubectl("delete", "namespace", namespace, "--wait=true", timeout=READY_TIMEOUT)
        finally:  # the files go even when the deletion is slow: the next attempt finds no namespace to retire
            for node in cluster.node_containers():
                if not node.endswith("-control-plane"):
                    docker("exec", node, "rm", "-rf", f"/var/lib/kubelet/plugins/{self.spec.name}", check=False)


def wait_driver(cluster: KindCluster, layout: Layout, timeout: float = READY_TIMEOUT, namespace: str = DRIVER_NAMESPACE) -> None:
    """Every GPU node has a Ready driver pod (in `namespace`) and at least one ResourceSlice."""
    api = cluster.api_client()
    try:
        core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        wanted = {n.name for n in layout.nodes}
        deadline = time.monotonic() + timeout
        while True:
            names = {n.metadata.name: n.metadata.labels.get("dra-testbed.io/layout-node")
                     for n in core.list_node(label_selector="dra-testbed.io/layout-node").items}
            pods = core.list_namespaced_pod(namespace).items
            running = {names.get(p.spec.node_name) for p in pods
                       if p.status.phase == "Running" and all(c.ready for c in (p.status.container_statuses or []))}
            sliced = {names.get(s.spec.node_name) for s in resource.list_resource_slice().items}
            if wanted <= running and wanted <= sliced:
                return
            if time.monotonic() > deadline:
                raise ClusterError(f"driver not up after {timeout:.0f}s: running on {sorted(x for x in running if x)}, "
                                   f"slices for {sorted(x for x in sliced if x)}, wanted {sorted(wanted)}")
            time.sleep(POLL_SECONDS)
    finally:
        api.close()


def kind_driver(spec: DriverSpec) -> KindDriver:
    """The kind implementation of `spec`; DriverSpecError when kind cannot run it."""
    return spec.implementation("kind")
