"""Loading the driver's image into the workers while `kind create cluster` is still running.

`kind create cluster` spends most of its minute in kubeadm on the control plane; the workers' containerd
answers well before they join. Copying the driver image (`kind load docker-image`) into them then
overlaps with kubeadm instead of following it: the largest step of `up` after kind's own. The driver's
deploy loads whatever is still missing (`KindCluster.load_images` checks each node), so a preload that
fails or is cut short costs nothing but its time.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from pathlib import Path

from hostenv.processes import stop_group
from testbed.clusters.kind.dockerd import DockerError, docker
from testbed.clusters.kind.kind_cli import settle_group

POLL_SECONDS = 0.5


def worker_names(kind_name: str, workers: int) -> list[str]:
    """kind's names for the worker containers of cluster `kind_name`."""
    return [f"{kind_name}-worker" + ("" if i == 1 else str(i)) for i in range(1, workers + 1)]


def containerd_answers(node: str) -> bool:
    """Whether the node container runs and its containerd answers (kind's node images carry `ctr`)."""
    try:
        return docker("exec", node, "ctr", "--timeout", "2s", "version", check=False, timeout=10).returncode == 0
    except DockerError:
        return False


class Preload:
    """A thread loading `images` into `nodes` of kind cluster `kind_name` as soon as each node's containerd answers."""

    def __init__(self, kind: Path, kind_name: str, nodes: list[str], images: list[str], deadline_s: float = 300.0) -> None:
        self.kind, self.kind_name, self.nodes, self.images = kind, kind_name, nodes, images
        self.deadline = time.monotonic() + deadline_s
        self.cancelled = threading.Event()
        self.process: subprocess.Popen | None = None
        self.loaded = False
        self.seconds = 0.0
        self.error = ""
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self._run, name=f"preload-{kind_name}", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        waiting = list(self.nodes)
        while waiting and not self.cancelled.is_set():
            waiting = [n for n in waiting if not containerd_answers(n)]
            if waiting:
                if time.monotonic() > self.deadline:
                    self.error = f"containerd of {', '.join(waiting)} did not answer in time"
                    return
                self.cancelled.wait(POLL_SECONDS)
        started = time.monotonic()
        with self._lock:
            if self.cancelled.is_set():
                return
            # its own session: the caller stops it (Ctrl-C reaches the caller, not a thread's child)
            self.process = subprocess.Popen(
                [str(self.kind), "load", "docker-image", "--name", self.kind_name, "--nodes", ",".join(self.nodes), *self.images],
                env=dict(os.environ, KIND_EXPERIMENTAL_PROVIDER="docker"), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        output, _ = self.process.communicate()
        # as run_kind does: kind returns on the first node that failed, the others' imports still under way
        settle_group(self.process.pid)
        self.seconds = time.monotonic() - started
        self.loaded = self.process.returncode == 0 and not self.cancelled.is_set()
        if not self.loaded and not self.cancelled.is_set():
            self.error = (output.strip().splitlines() or ["no output"])[-1]

    def finish(self, cancel: bool = False) -> None:
        """Wait for the load to end; with `cancel` (kind failed, or an interruption), stop it first."""
        if cancel:
            self.cancelled.set()
            with self._lock:
                if self.process is not None and self.process.poll() is None:
                    stop_group(self.process.pid, grace=2.0)
        self._thread.join()
