"""NVIDIA's DRA driver on a kind cluster: its kubelet plugin as the chart deploys it, on the fake machine.

From its binary (a gpu-kubelet-plugin executable: an image is built around it, kind_image.py) or from an
image (already in the local Docker engine, e.g. NVIDIA's own: loaded as it is). Either
runs as the DaemonSet of NVIDIA's Helm chart (templates/kind-nvidia-driver.yaml.j2) with the chart's
DeviceClasses. The plugin reads the node's machine as on a real node: the driver root, /proc/driver
and /sys/bus/pci views, the /proc/devices view as altProcDevices, the device nodes (gpu_nodes.py).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from fake_gpus.machine import namespace
from fake_gpus.machine.views import MachineViews
from fake_gpus.node import HEALTH_LABEL, SHARES_LABEL
from fake_gpus.nvml.state import NODE_STATE_DIR
from testbed.host import progress
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import BINARY, IMAGE, DriverSpecError
from testbed.host.docker.dockerd import image_present
from testbed.clusters.kind.driver import READY_TIMEOUT, KindCluster, KindDriver, wait_driver
from testbed.clusters.layout import Layout
from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary
from testbed.drivers.nvidia.classes import chart_device_classes
from testbed.drivers.nvidia.plugin import feature_gates
from testbed.templates import render_template

NAME = "dra-driver-nvidia-gpu"  # the chart's name: DaemonSet, RBAC and label names derive from it
NVIDIA_NAMESPACE = "nvidia-dra-driver-gpu"  # the namespace NVIDIA's install guide uses
SERVICE_ACCOUNT = f"{NAME}-service-account-kubeletplugin"
HEALTHCHECK_PORT = 51516  # the chart's kubeletPlugin.containers.gpus.healthcheckPort
VERBOSITY = 4  # the chart's logVerbosity
# node modes by the feature gates their plugin needs (dynamic MIG is gated; whole and static MIG are not)
GROUPS = (("", ("whole", "static-mig")), ("-dynamic-mig", ("dynamic-mig",)))


@dataclass(frozen=True)
class PluginGroup:
    """One DaemonSet of NVIDIA's plugin: the nodes whose modes take the same command line (feature gates and
    --consumable-shares, node settings that NVIDIA's chart can only give a whole DaemonSet)."""

    suffix: str  # of the DaemonSet's name
    modes: tuple[str, ...]  # mode kinds (label dra-testbed.io/mode) of its nodes
    shares: str | None  # their --consumable-shares (label dra-testbed.io/consumable-shares), None: disabled
    health: bool = False  # their mode ends `:health` (label dra-testbed.io/health-check): gate NVMLDeviceHealthCheck

    @property
    def gates(self) -> str:
        return feature_gates(self.modes[0], self.shares, self.health)

    @property
    def daemonset(self) -> str:
        return f"{NAME}-kubelet-plugin{self.suffix}"


def plugin_groups(layout: Layout) -> list[PluginGroup]:
    """The DaemonSets a layout needs: one per gate set (GROUPS), share value and health setting its GPU nodes have."""
    groups = []
    for suffix, modes in GROUPS:
        values = {(n.mode.shares, n.mode.health) for n in layout.nodes if n.mode.kind in modes}
        for shares, health in sorted(values, key=lambda v: (v[0] or "", v[1])):
            name = suffix + (f"-shares-{shares}" if shares else "") + ("-health" if health else "")
            groups.append(PluginGroup(name, modes, shares, health))
    return groups


def merged_gates(*lists: str) -> str:
    """Comma-separated feature gates, the later lists winning for a gate named twice (a user's FEATURE_GATES
    beside the ones a group's nodes need), in first-seen order."""
    gates: dict[str, str] = {}
    for text in lists:
        for item in filter(None, (part.strip() for part in text.split(","))):
            name, _, value = item.partition("=")
            gates[name] = value or "true"
    return ",".join(f"{name}={value}" for name, value in gates.items())


class NvidiaKindDriver(KindDriver):
    """NVIDIA's gpu-kubelet-plugin, from a binary or an image, on every GPU worker."""

    runs = (BINARY, IMAGE)
    namespace = NVIDIA_NAMESPACE

    def preflight(self) -> None:
        """The image must be in the local engine, the binary an executable file: found out before a cluster is made."""
        if self.spec.image and not image_present(self.spec.image):
            raise DriverSpecError(f"image {self.spec.image!r} is not in the local Docker engine; `docker load` or build it "
                                  "first (no registry is reachable), or give --driver-binary PATH")
        if self.spec.path:
            try:
                plugin_binary(self.spec.path)
            except PluginNotFound as exc:
                raise DriverSpecError(str(exc)) from None

    def image(self, minor: str = "") -> str:
        """The image to run: the given one (it must be in the local engine), or one built around the binary."""
        if self.spec.image:
            if not image_present(self.spec.image):
                raise ClusterError(f"image {self.spec.image!r} is not in the local Docker engine; `docker load` or build it first "
                                   "(no registry is reachable), or give --driver-binary PATH")
            return self.spec.image
        from testbed.drivers.nvidia.kind_image import ensure_plugin_image

        try:
            return ensure_plugin_image(plugin_binary(self.spec.path))
        except PluginNotFound as exc:
            raise ClusterError(str(exc)) from exc

    def deploy(self, cluster: KindCluster, layout: Layout, minor: str) -> None:
        """Load the image, replace any other driver, apply the chart's DeviceClasses and DaemonSets, and
        wait for every GPU node's plugin to run and publish."""
        image = self.image(minor)
        cluster.load_images(image, workers_only=True)
        manifest = cluster.home / "nvidia-driver.yaml"
        manifest.write_text(render_manifest(image, layout, self.spec.env))
        classes = cluster.home / "device-classes.json"
        classes.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": chart_device_classes()}))
        with progress.step(f"deploying NVIDIA's DRA driver ({image})"):
            # our driver's DaemonSets go first: two drivers must not manage one node's GPUs
            self.retire_others(cluster)
            cluster.kubectl("apply", "-f", str(classes))
            cluster.kubectl("apply", "-f", str(manifest))
            for group in plugin_groups(layout):
                cluster.kubectl("-n", NVIDIA_NAMESPACE, "rollout", "status", f"daemonset/{group.daemonset}",
                                f"--timeout={int(READY_TIMEOUT)}s", timeout=READY_TIMEOUT + 30)
            wait_driver(cluster, layout, namespace=NVIDIA_NAMESPACE)


def render_manifest(image: str, layout: Layout, env: dict[str, str]) -> str:
    """The DaemonSets (one per feature-gate set and share value the layout's nodes need), RBAC and namespace."""
    # NVIDIA's chart sets the plugin's gates through FEATURE_GATES; one a user gives (e.g. TimeSlicingSettings=true)
    # joins those each group's nodes need instead of being shadowed by them
    env = dict(env)
    extra = env.pop("FEATURE_GATES", "")
    groups = [{"suffix": g.suffix, "modes": list(g.modes), "gates": merged_gates(g.gates, extra), "shares": g.shares,
               "shares_label": SHARES_LABEL, "health": g.health, "health_label": HEALTH_LABEL}
              for g in plugin_groups(layout)]
    views = MachineViews(Path(NODE_STATE_DIR))
    return render_template(
        "kind-nvidia-driver.yaml.j2", chart=NAME, namespace=NVIDIA_NAMESPACE, service_account=SERVICE_ACCOUNT, groups=groups,
        image=image, pull_policy="IfNotPresent", healthcheck_port=HEALTHCHECK_PORT, verbosity=VERBOSITY,
        driver_root=str(views.driver_root), proc_devices=str(views.proc_devices), state_dir=NODE_STATE_DIR,
        mounts=namespace.mount_script(views), env=env)
