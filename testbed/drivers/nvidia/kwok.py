"""NVIDIA's gpu-kubelet-plugin as the driver of a KWOK cluster, from its binary.

Hardware first: while the control plane starts, every layout node gets its fake GPUs, OS views and
static MIG layout in `<home>/nvml/<node>` (the same place our publisher keeps them, so drivers can be
swapped on one node's hardware). Once the Nodes exist: the DeviceClasses of NVIDIA's chart, then one
plugin process per node and the stand-in kubelet (python -m testbed.kubelet) that registers them and
prepares the claims of pods bound to their nodes; `wait` returns when every node's pool is published.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver.nvml_adapter import NvmlLibrary
from fake_gpus.machine.provision import provision
from fake_gpus.nvml.build import SONAME, ensure_library
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import BINARY
from testbed.clusters.kwok.driver import KwokDriver
from testbed.clusters.layout import Layout
from testbed.host import progress
from testbed.kubelet import process as standin
from testbed.drivers.nvidia import plugin
from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary
from testbed.drivers.nvidia.classes import chart_device_classes


class NvidiaBinaryDriver(KwokDriver):
    """One NVIDIA plugin process per simulated node."""

    runs = (BINARY,)

    def spawn(self, home: Path, kubeconfig: Path, layout: Layout) -> None:
        try:
            self.binary = plugin_binary(self.spec.path)
        except PluginNotFound as exc:
            raise ClusterError(str(exc)) from exc
        progress.note(f"NVIDIA's gpu-kubelet-plugin: {self.binary}")
        self.kubeconfig, self.layout = kubeconfig, layout
        nvml = NvmlLibrary(ensure_library() / SONAME)
        self.views = {node.name: provision(plugin.state_dir(home, node.name), node.hardware, nvml=nvml) for node in layout.nodes}

    def wait(self, home: Path) -> None:
        api = config.new_client_from_config(config_file=str(self.kubeconfig))
        try:
            resource = client.ResourceV1Api(api)
            for body in chart_device_classes():
                try:
                    resource.create_device_class(body=body)
                except ApiException as exc:
                    if exc.status != 409:
                        raise
            plugins = []
            for node in self.layout.nodes:
                p = plugin.node_plugin(home, node.name, self.views[node.name])
                p.home.mkdir(parents=True, exist_ok=True)
                plugin.start(self.binary, p, self.kubeconfig, node.mode.kind, self.spec.env, shares=node.mode.shares,
                             health=node.mode.health)
                plugins.append(p)
            standin.start(home, self.kubeconfig, plugin.DRIVER, {p.node: p.registry_dir for p in plugins})
            with ThreadPoolExecutor(8) as pool:
                for future in [pool.submit(plugin.wait_published, api, p) for p in plugins]:
                    future.result()
        except plugin.PluginError as exc:
            raise ClusterError(str(exc)) from exc
        finally:
            api.close()

    @classmethod
    def stop(cls, home: Path) -> None:
        standin.stop(home)
        plugin.stop_all(home)
