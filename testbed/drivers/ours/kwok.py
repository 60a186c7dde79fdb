"""Our fake-GPU driver on KWOK: one ResourceSlice publisher for every node (fake_gpus.machine.launch), writing
each node's slices with that node's own credential, and per node our kubelet plugin, started by the stand-in
kubelet when the node's first claim-holding pod arrives and then called as the kubelet would."""

from __future__ import annotations

import hashlib
import subprocess
import sys
import tempfile
from pathlib import Path

from fake_gpus.driver.kubeletplugin import MIG_DYNAMIC, MIG_STATIC
from fake_gpus.machine import launch
from fake_gpus.nvml.build import ensure_library
from hostenv.dirs import remove_tree
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import OURS, DriverSpec
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT
from testbed.clusters.kwok.driver import ROLL_TIMEOUT, KwokDriver
from testbed.clusters.layout import Layout, NodeSpec
from testbed.kubelet import plugin_host, process as standin
from testbed.kube.waiting import WaitTimeout, until


def socket_root(home: Path) -> Path:
    """Short-pathed directory for our plugins' sockets (a unix socket path has at most 107 bytes)."""
    digest = hashlib.sha256(str(Path(home).resolve()).encode()).hexdigest()[:12]
    return Path(tempfile.gettempdir()) / "dra-testbed-ours" / digest


def plugin_dir(home: Path, node: str) -> Path:
    """Our plugin's directory for `node` (its DRA socket, checkpoint and call log), the kubelet's
    /var/lib/kubelet/plugins/<driver> on a real node; its registry directory is beside it."""
    return socket_root(home) / hashlib.sha256(node.encode()).hexdigest()[:8] / "plugin"


def remove_plugin_dirs(home: Path, node: str) -> None:
    """Remove `node`'s plugin and registry directories (its plugin stopped), and the socket root with them once
    no node's are left, and the shared `dra-testbed-ours` once no cluster's is."""
    remove_tree(plugin_dir(home, node).parent, empty_parents=2)


def remove_socket_root(home: Path) -> None:
    """Remove the cluster's socket root, and the shared `dra-testbed-ours` with it once no cluster's is left."""
    remove_tree(socket_root(home), empty_parents=1)


class OurDriver(KwokDriver):
    """Our fake-GPU driver: one publisher process for the whole cluster, writing each node's slices with that
    node's own credential (the driver's service account, its token bound to the node); a kubelet plugin
    per node on demand."""

    runs = (OURS,)

    def __init__(self, spec: DriverSpec) -> None:
        super().__init__(spec)
        self._proc: subprocess.Popen | None = None
        self._hosts = 0  # plugin hosts (testbed.kubelet.plugin_host); 0: a plugin process per node

    def _hosting(self, layout: Layout) -> None:
        try:
            self._hosts = plugin_host.hosts_for(len(layout.nodes))
        except ValueError as exc:
            raise ClusterError(str(exc)) from exc

    def spawn(self, home: Path, kubeconfig: Path, layout: Layout) -> None:
        self._hosting(layout)
        self._proc = launch.spawn_publisher(home, kubeconfig, env=self.spec.process_env(),
                                            node_identity=(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))
        self._kubeconfig, self._layout = kubeconfig, layout

    def wait(self, home: Path) -> None:
        assert self._proc is not None, "wait() before spawn()"
        try:
            launch.wait_publisher(home, self._proc)
        except RuntimeError as exc:
            raise ClusterError(str(exc)) from exc
        self._start_kubelet(home)

    def _start_kubelet(self, home: Path) -> None:
        """The stand-in kubelet, with each node's plugin to start when a pod there holds claims."""
        plugins = {node.name: self.plugin(home, self._kubeconfig, node) for node in self._layout.nodes}
        standin.start(home, self._kubeconfig, self.spec.name, {}, plugins)

    def plugin(self, home: Path, kubeconfig: Path, node: NodeSpec) -> standin.OnDemand:
        """How the stand-in starts `node`'s plugin: its MIG mode is the node's."""
        where = plugin_dir(home, node.name).parent
        mig = MIG_STATIC if node.mode.kind == "static-mig" else MIG_DYNAMIC
        files = home / "plugins" / node.name
        files.mkdir(parents=True, exist_ok=True)
        return standin.OnDemand(
            [sys.executable, "-m", "fake_gpus.driver.kubeletplugin", "--node-name", node.name,
             "--state-dir", str(home / "nvml" / node.name), "--nvml-lib-dir", str(ensure_library()),
             "--plugin-dir", str(where / "plugin"), "--registry-dir", str(where / "registry"),
             "--cdi-dir", str(files / "cdi"), "--kubeconfig", str(kubeconfig), "--mig", mig,
             "--namespace", DRIVER_NAMESPACE],  # MPS control daemons go beside the driver
            str(files / "plugin.log"), self.spec.process_env(), registry=str(where / "registry"),
            host=plugin_host.host_of(node.name, self._hosts))

    def join(self, home: Path, kubeconfig: Path, node: NodeSpec) -> None:
        standin.add_plugin(home, node.name, self.plugin(home, kubeconfig, node))

    def leave(self, home: Path, node: str) -> None:
        standin.remove_plugin(home, node)

    def roll(self, home: Path, kubeconfig: Path, layout: Layout) -> None:
        self._hosting(layout)
        launch.stop_publisher(home)
        self._proc = launch.spawn_publisher(home, kubeconfig, env=self.spec.process_env(),
                                            node_identity=(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))
        try:
            launch.wait_publisher(home, self._proc)
        except RuntimeError as exc:
            raise ClusterError(str(exc)) from exc
        running = {n.name: pid for n in layout.nodes if (pid := _instance(home, n.name, self._hosts)) is not None}
        for node in layout.nodes:  # the stand-in replaces each plugin by one of this spec
            self.join(home, kubeconfig, node)
        # done, as a DaemonSet's rollout is, once every node that ran a plugin runs the new one: until then a
        # kubelet call could still reach the old plugin, and a fault the new one brings would not show
        replaced = lambda: all(_instance(home, n, self._hosts) not in (None, old) for n, old in running.items())  # noqa: E731
        try:
            until("the stand-in kubelet running the new plugins", replaced, timeout=ROLL_TIMEOUT, interval=0.1)
        except WaitTimeout as exc:
            raise ClusterError(f"driver update: {exc}") from exc

    @classmethod
    def stop(cls, home: Path) -> None:  # the stand-in's stop ends plugin hosts too
        standin.stop(home)
        launch.stop_publisher(home)
        remove_socket_root(home)


def _instance(home: Path, node: str, hosts: int) -> int | str | None:
    """What runs `node`'s plugin now (None: nothing): its process, or in a host the version of its file served."""
    if hosts:
        return plugin_host.served_generation(home, node, plugin_host.host_of(node, hosts))
    return standin.plugin_pid(home, node)
