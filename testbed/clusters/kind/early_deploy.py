"""Deploying the driver while `kind create cluster` is still joining the workers.

kind writes the cluster's kubeconfig only when `create` returns, after the workers joined and the control
plane is Ready; the API server answers several seconds before. Applied then, the driver's DaemonSet has
its pod made the moment a GPU worker registers, and the pod starts while kind still waits: the rollout
overlaps the join instead of following it. Before that, while kubeadm still starts the control plane, the
driver's and kube-proxy's images are unpacked in each GPU worker (node_storage.py), so those first pods
start without it; and the GPU workers' NVIDIA device nodes are made before the apply, since a privileged
driver container sees the /dev its node had when it started. `KindDriver.deploy` runs after
as before: it finds the manifests applied (nothing changes) and waits for the rollout and the slices, so
an early deploy that fails or is cut short costs nothing but its time.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from pathlib import Path

import yaml

from testbed.host.docker.dockerd import DockerError, docker
from testbed.host.health import http_ok

POLL_SECONDS = 0.5
UNPACK_TRIES = 60  # polls: the workers boot within half a minute or are slow enough for kind to retry them
ADMIN_CONF_IN_NODE = "/etc/kubernetes/admin.conf"


def host_kubeconfig(admin_conf: str, host_endpoint: str) -> str:
    """kubeadm's admin.conf of a kind control plane, pointed at its port published on the host (kind's
    kubeconfig does the same when `create` ends)."""
    config = yaml.safe_load(admin_conf)
    for cluster in config.get("clusters") or []:
        cluster["cluster"]["server"] = f"https://{host_endpoint}"
    return yaml.safe_dump(config, sort_keys=False)


def published_endpoint(control_plane: str) -> str | None:
    """host:port Docker publishes the control plane's API server on, None until the container has it."""
    try:
        out = docker("port", control_plane, "6443/tcp", check=False, timeout=10)
    except DockerError:
        return None
    lines = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return lines[0].replace("0.0.0.0", "127.0.0.1") if out.returncode == 0 and lines else None


def api_server_ready(endpoint: str) -> bool:
    """Whether the API server at host:port answers /readyz with ok."""
    return http_ok(f"https://{endpoint}/readyz")


def read_admin_conf(control_plane: str) -> str | None:
    """kubeadm's admin.conf in the control plane, None until kubeadm wrote it."""
    try:
        out = docker("exec", control_plane, "cat", ADMIN_CONF_IN_NODE, check=False, timeout=10)
    except DockerError:
        return None
    return out.stdout if out.returncode == 0 and "clusters:" in out.stdout else None


class EarlyDeploy:
    """Threads that run each of `unpackers` once its worker boots (retried until it succeeds or UNPACK_TRIES
    polls pass), and, once the API server of `control_plane` answers, `prepare_nodes` and then
    `apply(kubeconfig)` until they succeed (the API server refuses requests for a while after it listens).
    The apply does not wait for the unpacking: a pod that starts first unpacks what it needs itself."""

    def __init__(self, control_plane: str, kubeconfig: Path, unpackers: list[Callable[[], None]],
                 prepare_nodes: Callable[[], None], apply: Callable[[Path], None], deadline_s: float = 240.0) -> None:
        self.control_plane, self.kubeconfig = control_plane, kubeconfig
        self.prepare_nodes, self.apply = prepare_nodes, apply
        self.deadline = time.monotonic() + deadline_s
        self.cancelled = threading.Event()
        self.unpacked = 0  # how many of the unpackers succeeded
        self.nodes_prepared = False
        self.applied = False
        self.seconds = 0.0
        self.error = ""
        self._endpoint: str | None = None
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._unpack, args=(u,), name=f"unpack-{i}", daemon=True) for i, u in enumerate(unpackers)]
        self._threads.append(threading.Thread(target=self._deploy, name=f"early-deploy-{control_plane}", daemon=True))
        for thread in self._threads:
            thread.start()

    def _wait(self) -> bool:
        """Sleep one poll; False when cancelled or past the deadline (the error says which)."""
        if time.monotonic() > self.deadline:
            self.error = self.error or "the API server did not answer in time"
            return False
        return not self.cancelled.wait(POLL_SECONDS)

    def _unpack(self, unpacker: Callable[[], None]) -> None:
        # a worker's container appears, then its containerd answers, some seconds after kind starts
        for _ in range(UNPACK_TRIES):
            try:
                unpacker()
            except Exception:  # noqa: BLE001 - not booted yet
                if self.cancelled.wait(POLL_SECONDS):
                    return
                continue
            with self._lock:
                self.unpacked += 1
            return

    def _api_ready(self) -> str | None:
        """The API server's host endpoint once it answers /readyz (checked on the host, cheaper than a
        `docker exec` per poll on 2 cores busy starting the control plane), else None."""
        self._endpoint = self._endpoint or published_endpoint(self.control_plane)
        return self._endpoint if self._endpoint and api_server_ready(self._endpoint) else None

    def _deploy(self) -> None:
        while (endpoint := self._api_ready()) is None or (admin := read_admin_conf(self.control_plane)) is None:
            if not self._wait():
                return
        self.kubeconfig.touch(mode=0o600)
        self.kubeconfig.write_text(host_kubeconfig(admin, endpoint))
        while True:
            try:
                if not self.nodes_prepared:
                    self.prepare_nodes()
                    self.nodes_prepared = True
                self.apply(self.kubeconfig)
                self.applied = True
                self.seconds = time.monotonic() - self._started
                return
            except Exception as exc:  # noqa: BLE001 - the API server starting up, a node still booting: try again
                self.error = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            if not self._wait():
                return

    def finish(self) -> None:
        """Stop retrying and wait for the attempts under way: called once kind returned (after it the
        deploy does all of it anyway), failed, or was interrupted."""
        self.cancelled.set()
        for thread in self._threads:
            thread.join()
