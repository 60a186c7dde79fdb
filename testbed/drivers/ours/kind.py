"""Our fake-GPU driver on kind: two DaemonSets (dynamic and static MIG) of our driver image, built from this
tree, each running a kubelet plugin and a slice publisher per GPU worker."""

from __future__ import annotations

import json
from pathlib import Path

from fake_gpus.driver.identity import DriverIdentity
from testbed.clusters.driver import OURS
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT, POLICY_NAME
from testbed.clusters.kind.driver import READY_TIMEOUT, KindCluster, KindDriver, wait_driver
from testbed.clusters.kind.nodes import NVML_LIB_IN_NODE, NVML_STATE_IN_NODE
from testbed.clusters.layout import Layout
from testbed.host import progress
from testbed.templates import render_template


class OurDriver(KindDriver):
    """Our fake-GPU driver image, built from this tree and loaded into the workers."""

    runs = (OURS,)

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
            self.retire_others(cluster)
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
