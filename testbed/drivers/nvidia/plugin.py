"""One NVIDIA gpu-kubelet-plugin process per simulated node, on that node's fake hardware.

Each node's plugin gets its own directories (CDI specs, kubelet plugin and registry sockets, a
checkpoint) under `<cluster home>/nvidia/<node>` and runs in a private mount namespace holding the
node's views (fake_gpus.machine): its driver root with the fake libnvidia-ml, /proc/driver with the
nvidia-caps files the fake NVML keeps, /sys/bus/pci with the node's GPUs. Out of cluster it talks to
the API server through a kubeconfig, as NVIDIA's own mock CI runs it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client

from fake_gpus.machine import namespace
from fake_gpus.machine.views import MachineViews
from hostenv.dirs import remove_tree
from hostenv.processes import alive, terminate

from testbed.errors import EnvironmentProblem

DRIVER = "gpu.nvidia.com"
IMAGE_NAME = "dra-testbed.local/nvidia-gpu-kubelet-plugin:fake"  # required flag; nothing pulls it on KWOK
START_TIMEOUT = 120.0
# With gate MPSSupport the plugin reads its MPS control daemon's Deployment template from /templates (a path
# fixed in its source); ours (templates/) is shown there in its mount namespace, the host's / left as it is
MPS_TEMPLATES = Path(__file__).parent / "templates"
MPS_GATE = "MPSSupport=true"
HEALTH_GATE = "NVMLDeviceHealthCheck=true"  # device taints from NVML events (docs/design/health.md)


class PluginError(EnvironmentProblem):
    """A node's plugin exited or did not publish; one line with its last log line."""


@dataclass(frozen=True)
class NodePlugin:
    """The files of one node's plugin."""

    node: str
    home: Path
    views: MachineViews | None  # None when only stopping or removing it

    @property
    def cdi_root(self) -> Path:
        return self.home / "cdi"

    @property
    def socket_root(self) -> Path:
        """Short-pathed directory for the plugin's sockets (a unix socket path has at most 107 bytes)."""
        digest = hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:12]
        return Path(tempfile.gettempdir()) / "dra-testbed-nvidia" / digest

    @property
    def plugins_dir(self) -> Path:
        return self.socket_root / "plugins"

    @property
    def registry_dir(self) -> Path:
        return self.socket_root / "plugins_registry"

    @property
    def hook(self) -> Path:
        return self.home / "nvidia-cdi-hook"

    @property
    def log(self) -> Path:
        return self.home / "plugin.log"

    @property
    def pid_file(self) -> Path:
        return self.home / "plugin.pid"

    @property
    def socket(self) -> Path:
        """The DRA gRPC socket the kubelet (or our stand-in) calls."""
        return self.plugins_dir / DRIVER / "dra.sock"

    @property
    def checkpoint(self) -> Path:
        return self.plugins_dir / DRIVER / "checkpoint.json"

    def pid(self) -> int | None:
        try:
            return int(self.pid_file.read_text().strip())
        except (OSError, ValueError):
            return None


def state_dir(cluster_home: Path, node: str) -> Path:
    """A node's fake hardware (fake-NVML state and OS views), where our publisher keeps it too."""
    return Path(cluster_home) / "nvml" / node


def node_plugin(cluster_home: Path, node: str, views: MachineViews) -> NodePlugin:
    return NodePlugin(node, Path(cluster_home) / "nvidia" / node, views)


def feature_gates(mode_kind: str, shares: str | None = None, health: bool = False) -> str:
    """Dynamic MIG, consumable shares and health monitoring (a mode ending `:health`) are feature gates of NVIDIA's
    driver; whole and static MIG need none."""
    gates = ["DynamicMIG=true"] if mode_kind == "dynamic-mig" else []
    return ",".join(gates + (["ConsumableShares=true"] if shares else []) + ([HEALTH_GATE] if health else []))


def plugin_argv(binary: Path, plugin: NodePlugin, kubeconfig: Path, mode_kind: str, gates: tuple[str, ...] = (),
                shares: str | None = None, health: bool = False) -> list[str]:
    """The plugin's command line; `gates` are more of its feature gates (e.g. TimeSlicingSettings=true);
    `shares` its --consumable-shares value (None: disabled, the flag left out); `health` the node's mode asks for
    health monitoring."""
    assert plugin.views is not None
    root = str(plugin.views.driver_root)
    argv = [str(binary), "--node-name", plugin.node, "--kubeconfig", str(kubeconfig),
            "--cdi-root", str(plugin.cdi_root), "--nvidia-driver-root", root, "--container-driver-root", root,
            "--nvidia-cdi-hook-path", str(plugin.hook), "--image-name", IMAGE_NAME,
            "--kubelet-registrar-directory-path", str(plugin.registry_dir),
            "--kubelet-plugins-directory-path", str(plugin.plugins_dir)]
    if shares:
        argv += ["--consumable-shares", shares]
    # once each: a caller may name a gate the mode implies too (the health suites pass HEALTH_GATE)
    every = ",".join(dict.fromkeys(g for g in ",".join((feature_gates(mode_kind, shares, health), *gates)).split(",") if g))
    return argv + (["--feature-gates", every] if every else [])


def start(binary: Path, plugin: NodePlugin, kubeconfig: Path, mode_kind: str, env: dict[str, str] | None = None,
          gates: tuple[str, ...] = (), shares: str | None = None, health: bool = False) -> int:
    """Start the node's plugin (not waiting for it); returns its pid, which is also recorded."""
    assert plugin.views is not None
    for d in (plugin.cdi_root, plugin.plugins_dir, plugin.registry_dir):
        d.mkdir(parents=True, exist_ok=True)
    if not plugin.hook.exists():  # CDI specs name the hook; on KWOK no runtime runs it
        plugin.hook.write_text("#!/bin/sh\nexit 0\n")
        plugin.hook.chmod(0o755)
    environment = {**os.environ, **namespace.environment(plugin.views), **(env or {})}
    root_dirs = {"templates": MPS_TEMPLATES} if MPS_GATE in gates else None
    argv = namespace.wrap(plugin_argv(binary, plugin, kubeconfig, mode_kind, gates, shares, health), plugin.views, root_dirs)
    with open(plugin.log, "ab") as log:
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
                                start_new_session=True)  # a Ctrl-C of the caller must not cut it half-way
    plugin.pid_file.write_text(f"{proc.pid}\n")
    return proc.pid


def last_log_line(plugin: NodePlugin) -> str:
    try:
        lines = [l for l in plugin.log.read_text(errors="replace").splitlines() if l.strip()]
    except OSError:
        return "no log"
    return lines[-1] if lines else "no output"


def stop(plugin: NodePlugin, grace: float = 10.0) -> None:
    """SIGTERM the node's plugin (its mount namespace goes with it), SIGKILL after `grace` s."""
    pid = plugin.pid()
    if pid is not None:
        terminate(pid, grace)
    plugin.pid_file.unlink(missing_ok=True)


def remove(plugin: NodePlugin) -> None:
    """Stop the plugin and remove its files (sockets and checkpoint included): the node is gone."""
    stop(plugin)
    remove_tree(plugin.socket_root, empty_parents=1)  # and the shared dra-testbed-nvidia with the last node's
    shutil.rmtree(plugin.home, ignore_errors=True)


def stop_all(cluster_home: Path, grace: float = 10.0) -> None:
    """Stop and remove every node plugin under a cluster's home."""
    for home in sorted((Path(cluster_home) / "nvidia").glob("*")):
        if home.is_dir():
            remove(NodePlugin(home.name, home, None))


def published(api: client.ApiClient, node: str) -> list[dict] | None:
    """The node's complete pool (every slice of its newest generation), as JSON; None while incomplete."""
    import json

    raw = client.ResourceV1Api(api).list_resource_slice(field_selector=f"spec.nodeName={node},spec.driver={DRIVER}",
                                                       _preload_content=False).data
    items = json.loads(raw)["items"]
    if not items:
        return None
    newest = max(s["spec"]["pool"]["generation"] for s in items)
    pool = [s for s in items if s["spec"]["pool"]["generation"] == newest]
    return pool if len(pool) == pool[0]["spec"]["pool"]["resourceSliceCount"] else None


def wait_published(api: client.ApiClient, plugin: NodePlugin, timeout: float = START_TIMEOUT) -> list[dict]:
    """The node's slices once its plugin has published them all; PluginError if it exits or times out."""
    deadline = time.monotonic() + timeout
    while True:
        pool = published(api, plugin.node)
        if pool is not None:
            return pool
        pid = plugin.pid()
        if pid is None or not alive(pid):
            raise PluginError(f"NVIDIA's plugin for node {plugin.node} exited: {last_log_line(plugin)} (log: {plugin.log})")
        if time.monotonic() > deadline:
            raise PluginError(f"NVIDIA's plugin for node {plugin.node} published nothing in {timeout:.0f}s: "
                              f"{last_log_line(plugin)} (log: {plugin.log})")
        time.sleep(0.1)
