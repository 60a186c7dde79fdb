"""MPS control daemon pods of KWOK nodes, run as host processes: the stand-in kubelet as their container runtime.

On KWOK a pod never runs: KWOK only marks it ready. A GPU driver's MPS control daemon Deployment (ours,
fake_gpus/driver/kubeletplugin/strategies.py) would then start no daemon, and the node's fake NVML would never
list one. So for a pod of such a Deployment (its container `mps-control-daemon`, `command: [sh, -c]`) bound
to a node it serves, the stand-in kubelet runs the container's script on the host, in a process group of its
own, with the container's env, where an env value naming a hostPath volume's mount path becomes that
volume's host path (no mount namespace here: the script and the stand-in nvidia-cuda-mps-control see host
paths), and PATH starting with a directory holding the stand-in nvidia-cuda-mps-control. A pod deleted or
gone has its process group terminated (SIGTERM, then SIGKILL), as a container's end kills every process in it.
NVIDIA's Deployment chroots into /driver-root, which this runtime cannot do: its pods are left to KWOK.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from fake_gpus.nvml.mps_control import write_launcher

CONTAINER = "mps-control-daemon"
GRACE = 5.0  # seconds between SIGTERM and SIGKILL, as a pod's default grace is longer but nothing here needs more
BACKOFF_START, BACKOFF_MAX = 10.0, 300.0  # the kubelet's restart backoff of a crashing container


def runnable(pod) -> bool:
    """A control daemon pod this runtime can run: a pod of a control daemon Deployment (its `app` label the
    Deployment's name, as our plugin makes them: a script on the host is run for these pods only), its one container
    a shell script without chroot."""
    if not ((pod.metadata.labels or {}).get("app") or "").startswith(CONTAINER + "-"):
        return False
    containers = pod.spec.containers or []
    if len(containers) != 1 or containers[0].name != CONTAINER:
        return False
    c = containers[0]
    return (c.command or []) == ["sh", "-c"] and len(c.args or []) == 1 and "chroot" not in c.args[0]


def host_env(pod) -> dict[str, str]:
    """The container's literal env, paths of hostPath mounts translated to the host's."""
    c = pod.spec.containers[0]
    host = {v.name: v.host_path.path for v in pod.spec.volumes or [] if v.host_path is not None}
    mounts = {m.mount_path.rstrip("/"): host[m.name] for m in c.volume_mounts or [] if m.name in host}
    return {e.name: mounts.get((e.value or "").rstrip("/"), e.value or "") for e in c.env or [] if e.value_from is None}


@dataclass
class MpsPods:
    """The running control daemon pods (namespace/name -> their shell), for the nodes `serves` accepts."""

    serves: Callable[[str], bool]
    bin_dir: Path | None = None  # the stand-in's launcher and the pods' logs, made with the first pod, removed by stop_all
    running: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: list[Path] = field(default_factory=list)  # each pod's output (its container log), kept for reading
    backoff: dict[str, tuple[float, float]] = field(default_factory=dict)  # key -> (next start allowed, delay): a crash loop's

    def handle(self, pod) -> None:
        """Start a pod's daemon, or end it once the pod is deleted or finished."""
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        if not pod.spec.node_name or not self.serves(pod.spec.node_name) or not runnable(pod):
            return
        if pod.metadata.deletion_timestamp is not None or (pod.status and pod.status.phase in ("Succeeded", "Failed")):
            self.gone(key)
            return
        proc = self.running.get(key)
        if proc is not None and proc.poll() is None:
            return
        if proc is not None:
            _end_group(self.running.pop(key))  # the script exited: what it started goes with it, as a container's cgroup does
        next_start, delay = self.backoff.get(key, (0.0, BACKOFF_START / 2))
        if time.monotonic() < next_start:
            return  # exited: restarted after a growing delay, as the kubelet restarts a crashing container
        self.backoff[key] = (time.monotonic() + delay * 2, min(delay * 2, BACKOFF_MAX))
        if self.bin_dir is None:
            self.bin_dir = Path(tempfile.mkdtemp(prefix="mps-pods-"))
            write_launcher(self.bin_dir / "bin")
        env = {"PATH": f"{self.bin_dir / 'bin'}:{os.environ.get('PATH', '/usr/bin:/bin')}", **host_env(pod)}
        path = self.bin_dir / f"pod-{pod.metadata.uid}.log"
        self.logs.append(path)
        with open(path, "ab") as log:
            self.running[key] = subprocess.Popen(["sh", "-c", pod.spec.containers[0].args[0]], env=env, stdin=subprocess.DEVNULL,
                                                 stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    def gone(self, key: str) -> None:
        """End the pod's process group (the daemon the script started is in it)."""
        proc = self.running.pop(key, None)
        self.backoff.pop(key, None)
        if proc is not None:
            _end_group(proc)

    def stop_all(self) -> None:
        for key in list(self.running):
            self.gone(key)
        if self.bin_dir is not None:
            shutil.rmtree(self.bin_dir, ignore_errors=True)
            self.bin_dir = None


def _end_group(proc: subprocess.Popen) -> None:
    """SIGTERM to the process group `proc` leads, SIGKILL to what is left of it after GRACE seconds."""
    _signal_group(proc.pid, signal.SIGTERM)
    deadline = time.monotonic() + GRACE
    while time.monotonic() < deadline and _group_alive(proc.pid):
        proc.poll()
        time.sleep(0.05)
    _signal_group(proc.pid, signal.SIGKILL)
    proc.wait()


def _signal_group(pgid: int, sig: int) -> None:
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    return True
