"""The driver on a kind cluster's GPU workers, behind one small interface per driver kind.

Ours is two DaemonSets (dynamic and static MIG) of our driver image: a kubelet plugin and a slice publisher
per node. NVIDIA's (a plugin binary or an image) is the DaemonSet of its chart (nvidia_driver.py). Each
is a `KindDriver` in DRIVERS; deploying one removes the other.
"""

from __future__ import annotations

import abc
import importlib
import json
import time
from pathlib import Path
from typing import TYPE_CHECKING

from kubernetes import client

from fake_gpus.driver.identity import DriverIdentity
from testbed.host import progress
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec, DriverSpecError, unsupported
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT, POLICY_NAME
from testbed.clusters.kind.nodes import NVML_LIB_IN_NODE, NVML_STATE_IN_NODE
from testbed.clusters.layout import Layout
from testbed.templates import render_template

if TYPE_CHECKING:
    from testbed.clusters.kind.cluster import KindCluster

READY_TIMEOUT = 300.0
POLL_SECONDS = 0.25  # up returns this much after the driver is ready, at worst


class KindDriver(abc.ABC):
    """How one kind of driver is deployed on a running kind cluster."""

    def __init__(self, spec: DriverSpec) -> None:
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


class OurDriver(KindDriver):
    """Our fake-GPU driver image, built from this tree and loaded into the workers."""

    def image(self, minor: str) -> str:
        from testbed.clusters.kind.images.driver_image import ensure_driver_image

        return ensure_driver_image(minor)

    early_apply = True

    def apply(self, cluster: KindCluster, layout: Layout, minor: str, kubeconfig: Path | None = None) -> None:
        """Write and apply the device classes, RBAC, policy and DaemonSets (one per MIG kind in `layout`)."""
        manifest, classes = cluster.home / "driver.yaml", cluster.home / "device-classes.json"
        manifest.write_text(render_template(
            "kind-driver.yaml.j2", namespace=DRIVER_NAMESPACE, service_account=DRIVER_SERVICE_ACCOUNT, policy=POLICY_NAME,
            groups=_groups(layout),
            image=self.image(minor), state_dir=NVML_STATE_IN_NODE, lib_dir=NVML_LIB_IN_NODE, k8s=minor, env=self.spec.process_env()))
        classes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": DriverIdentity(self.spec.name).device_classes()}))
        cluster.kubectl("apply", "-f", str(classes), "-f", str(manifest), kubeconfig=kubeconfig, timeout=30)

    def deploy(self, cluster: KindCluster, layout: Layout, minor: str) -> None:
        """Load the driver image where it is missing, apply the manifests; wait for every GPU node's plugin
        to run and its slices to appear."""
        image = self.image(minor)
        cluster.load_images(image, workers_only=True)  # the control plane runs no driver
        manifest = cluster.home / "driver.yaml"
        before = manifest.read_text() if manifest.is_file() else None
        with progress.step(f"deploying the driver ({image})"):
            from testbed.drivers.nvidia.kind import NVIDIA_NAMESPACE

            self.retire(cluster, NVIDIA_NAMESPACE)
            self.apply(cluster, layout, minor)
            if before is not None and before != manifest.read_text():
                # A redeploy with a new image or env: every node at once. The rolling update would replace the
                # pods node by node (minutes per node on a loaded machine); node.rolling-update tests that path.
                cluster.kubectl("-n", DRIVER_NAMESPACE, "delete", "pods", "-l", "app.kubernetes.io/name=dra-testbed-driver",
                                "--wait=false")
            for group in _groups(layout):  # a redeploy (new image or env) must be rolled out before tests go on
                cluster.kubectl("-n", DRIVER_NAMESPACE, "rollout", "status", f"daemonset/dra-testbed-driver-{group['name']}",
                                f"--timeout={int(READY_TIMEOUT)}s", timeout=READY_TIMEOUT + 30)
            wait_driver(cluster, layout)


def _groups(layout: Layout) -> list[dict]:
    """Our driver's DaemonSets for `layout`: dynamic (whole GPUs, dynamic MIG) and static MIG, those it needs."""
    groups = []
    for mig, modes in (("dynamic", ("whole", "dynamic-mig")), ("static", ("static-mig",))):
        if any(n.mode.kind in modes for n in layout.nodes):
            groups.append({"name": mig, "mig": mig, "modes": list(modes)})
    return groups


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


DRIVERS: dict[str, str] = {"ours": "testbed.clusters.kind.driver:OurDriver",
                           "binary": "testbed.drivers.nvidia.kind:NvidiaKindDriver",
                           "image": "testbed.drivers.nvidia.kind:NvidiaKindDriver"}


def kind_driver(spec: DriverSpec) -> KindDriver:
    """The kind implementation of `spec`; DriverSpecError naming the kinds kind runs otherwise."""
    if spec.kind not in DRIVERS:
        raise DriverSpecError(unsupported("kind", spec, tuple(DRIVERS)))
    module, name = DRIVERS[spec.kind].split(":")
    return getattr(importlib.import_module(module), name)(spec)
