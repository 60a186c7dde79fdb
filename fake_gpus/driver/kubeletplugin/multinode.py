"""One process serving the kubelet plugins of many simulated nodes: a plugin host.

`python -m fake_gpus.driver.kubeletplugin.multinode --nodes-dir DIR` serves every node described in DIR, one
<node>.json each ({"args": the plugin's own command-line arguments, "env": that node's added environment,
"generation": any text}), read every POLL_SECONDS: a new file is a node to serve, a file gone a node to stop,
a rewritten one (other inode or mtime) a node stopped and served anew from it. Each node is exactly what
`python -m fake_gpus.driver.kubeletplugin ARGS` would be for it, on the same sockets, checkpoint, CDI
directory and NVML state directory, with its own fault switches (from its "env"); only the process, the
NVML library, the API clients and the gRPC worker threads are shared. A node being served has
<node>.serving beside its file (its "generation"), removed once it is stopped; a node that fails to start
has <node>.failed (the one-line reason) and is tried again after RETRY_SECONDS, as the stand-in kubelet
restarts a plugin process that exited.

NVML is process-global (pynvml, and the fake library's state directory): each node's driver opens a
session on its own state directory for each call (nvml_adapter.NvmlLibrary.session, serialised), where a
plugin of its own holds one for its life. A node's failure (an exception while it starts or serves a call)
stays that node's: the driver turns a call's exception into the claim's error, and a start that fails
leaves the other nodes served.
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
import threading
import time
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import ContextManager, Mapping

import grpc

from fake_gpus.driver.kubeletplugin.__main__ import parse_args
from fake_gpus.driver.kubeletplugin.claims import api_client
from fake_gpus.driver.kubeletplugin.server import KubeletPlugin, PluginConfig, log
from fake_gpus.driver.faults import NVML_PLACES_FAULT
from fake_gpus.driver.nvml_adapter import SONAME, Nvml, NvmlLibrary

POLL_SECONDS = 0.2
RETRY_SECONDS = 1.0
WORKERS = 16  # gRPC worker threads for all nodes together: a call is short and NVML calls are serialised anyway
SERVING, FAILED = ".serving", ".failed"


class HostError(RuntimeError):
    """A node cannot be served by this host; the message names the node and what was wrong."""


class SessionNvml(Nvml):
    """The adapter for a hosted node: no session of its own to close (each call opens one)."""

    def close(self) -> None:
        pass


class Shared:
    """What every node of the host shares: the NVML library, API clients per kubeconfig, the gRPC workers."""

    def __init__(self, workers: int = WORKERS) -> None:
        self.library: NvmlLibrary | None = None
        self.library_path: Path | None = None
        self.executor = futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="plugin-host")
        self._apis: dict[str, object] = {}
        self._lock = threading.Lock()

    def nvml(self, lib_dir: Path | None) -> NvmlLibrary:
        """The one NVML library of this process; a node asking for another is refused."""
        if lib_dir is None:
            raise HostError("a hosted node needs --nvml-lib-dir (the fake library, which can switch state directories)")
        path = (lib_dir / SONAME).resolve()
        with self._lock:
            if self.library is None:
                self.library, self.library_path = NvmlLibrary(path), path
            elif path != self.library_path:
                raise HostError(f"--nvml-lib-dir {lib_dir}: this host already uses {self.library_path}")
            return self.library

    def api(self, kubeconfig: str):
        with self._lock:
            if kubeconfig not in self._apis:
                self._apis[kubeconfig] = api_client(kubeconfig)
            return self._apis[kubeconfig]


class HostedPlugin(KubeletPlugin):
    """One node's plugin inside a host: NVML through per-call sessions on its state directory, the host's API
    client and gRPC workers; one gRPC server answers both of its sockets."""

    def __init__(self, config: PluginConfig, environ: Mapping[str, str], shared: Shared) -> None:
        super().__init__(config, environ)
        if config.state_dir is None:
            raise HostError(f"node {config.node_name}: a hosted node needs --state-dir (its fake NVML state)")
        if not config.state_dir.is_dir():
            raise HostError(f"node {config.node_name}: --state-dir {config.state_dir}: no such directory")
        self.shared = shared
        self._library = shared.nvml(config.nvml_lib_dir)
        self._one: grpc.Server | None = None

    def _open_nvml(self) -> Nvml:
        return SessionNvml(nvml_places=NVML_PLACES_FAULT in self.config.faults)

    def _nvml_session(self) -> ContextManager[object]:
        return self._library.session(self.config.state_dir)

    def _api(self):
        return self.shared.api(self.config.kubeconfig)

    def _server(self) -> grpc.Server:
        # one server per node, not one per socket: a server costs a polling thread and a completion queue
        if self._one is None:
            self._one = grpc.server(self.shared.executor)
            self._servers.append(self._one)
        return self._one

    def _serve(self, server: grpc.Server, socket: Path) -> None:
        socket.unlink(missing_ok=True)  # left by a host that was killed
        server.add_insecure_port(f"unix://{socket}")
        if socket == self.config.registration_socket:  # the last one: every service is added by now
            server.start()


@dataclass
class _Node:
    version: tuple[int, int]
    plugin: HostedPlugin | None = None
    retry_at: float = 0.0


@dataclass
class PluginHost:
    """The nodes of `nodes_dir`, served in this process."""

    nodes_dir: Path
    shared: Shared = field(default_factory=Shared)
    nodes: dict[str, _Node] = field(default_factory=dict)

    def round(self) -> None:
        """Follow the directory once: start, stop or restart nodes; retry those that failed."""
        present: dict[str, tuple[Path, tuple[int, int]]] = {}
        for path in self.nodes_dir.glob("*.json"):
            try:
                st = path.stat()
            except OSError:
                continue  # removed meanwhile
            present[path.stem] = (path, (st.st_ino, st.st_mtime_ns))
        for name in [n for n in self.nodes if n not in present]:
            self._stop(name)
            del self.nodes[name]
        for name, (path, version) in present.items():
            node = self.nodes.get(name)
            if node is not None and node.version != version:  # rewritten: a driver update or mode switch
                self._stop(name)
                node = None
            if node is None:
                node = self.nodes[name] = _Node(version)
            if node.plugin is None and time.monotonic() >= node.retry_at:
                self._start(name, path, node)

    def _start(self, name: str, path: Path, node: _Node) -> None:
        failed = self.nodes_dir / f"{name}{FAILED}"
        plugin = None
        try:
            spec = json.loads(path.read_text())
            env = {str(k): str(v) for k, v in (spec.get("env") or {}).items()}
            config = _config(name, [str(a) for a in spec["args"]], env)
            plugin = HostedPlugin(config, env, self.shared)
            plugin.start()
        except Exception as exc:  # noqa: BLE001 - this node's failure, never the host's
            reason = f"node {name}: kubelet plugin failed to start: {type(exc).__name__}: {exc}"
            log(reason)
            if plugin is not None:
                _quietly_stop(plugin)
            failed.write_text(reason + "\n")
            node.retry_at = time.monotonic() + RETRY_SECONDS
            return
        failed.unlink(missing_ok=True)
        node.plugin = plugin
        (self.nodes_dir / f"{name}{SERVING}").write_text(str(spec.get("generation", "")) + "\n")

    def _stop(self, name: str) -> None:
        node = self.nodes.get(name)
        if node is not None and node.plugin is not None:
            _quietly_stop(node.plugin)
            node.plugin = None
        (self.nodes_dir / f"{name}{SERVING}").unlink(missing_ok=True)
        (self.nodes_dir / f"{name}{FAILED}").unlink(missing_ok=True)

    def close(self) -> None:
        """Stop every node (its sockets removed), then the workers."""
        for name in list(self.nodes):
            self._stop(name)
        self.nodes.clear()
        self.shared.executor.shutdown(wait=False, cancel_futures=True)

    def run(self, stop: threading.Event) -> None:
        try:
            while not stop.is_set():
                self.round()
                stop.wait(POLL_SECONDS)
        finally:
            self.close()


def _config(name: str, args: list[str], env: dict[str, str]) -> PluginConfig:
    """The node's configuration as its own plugin process would parse it; HostError for bad arguments."""
    try:
        config = parse_args(args, env)
    except SystemExit as exc:  # argparse has printed the one line naming what was wrong
        raise HostError(f"node {name}: bad plugin arguments {args}") from exc
    if config.node_name != name:
        raise HostError(f"node {name}: its file names node {config.node_name!r} (--node-name)")
    if config.ready_port is not None:
        raise HostError(f"node {name}: --ready-port is for a plugin of its own (a DaemonSet pod), not a hosted node")
    return config


def _quietly_stop(plugin: KubeletPlugin) -> None:
    try:
        plugin.stop()
    except Exception as exc:  # noqa: BLE001 - stopping one node must not stop the others
        log(f"node {plugin.config.node_name}: stopping failed: {type(exc).__name__}: {exc}")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m fake_gpus.driver.kubeletplugin.multinode", description=__doc__.splitlines()[0])
    p.add_argument("--nodes-dir", type=Path, required=True, help="<node>.json per node to serve, read every round")
    p.add_argument("--workers", type=int, default=WORKERS, help="gRPC worker threads shared by all nodes")
    a = p.parse_args(argv)
    if not a.nodes_dir.is_dir():
        print(f"error: --nodes-dir {a.nodes_dir}: no such directory", file=sys.stderr)
        return 2
    if a.workers < 1:
        print(f"error: --workers {a.workers}: must be at least 1", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    log(f"plugin host serving the nodes of {a.nodes_dir}")
    PluginHost(a.nodes_dir, Shared(a.workers)).run(stop)
    log("plugin host stopped")
    return 0


if __name__ == "__main__":
    sys.exit(main())
