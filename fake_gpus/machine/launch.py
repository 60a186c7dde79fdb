"""Test-bed side of the KWOK publisher: start and stop the process.

This module may read the catalog (it stands where a cluster admin writes a MIG config); the publisher's
driver half never does.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

from hostenv.processes import interrupts_held, terminate

PID_FILE = "publisher.pid"
READY_FILE = "publisher.ready"
LOG_FILE = "publisher.log"
START_TIMEOUT = 600.0  # a first build of the fake NVML library happens inside this
_REPO = Path(__file__).resolve().parents[2]


def spawn_publisher(home: Path, kubeconfig: Path, env: dict[str, str] | None = None,
                    node_identity: tuple[str, str] | None = None) -> subprocess.Popen:
    """Start the publisher for the cluster at `home` without waiting for it; with `node_identity` (namespace,
    service account) it writes each node's slices with that account's token bound to the node.

    It may start before the control plane: it waits for `kubeconfig` to appear and the apiserver to
    answer, so its start-up (imports, the NVML library) overlaps the cluster's."""
    config = {"kubeconfig": str(kubeconfig), "state_root": str(home / "nvml"), "ready_file": str(home / READY_FILE),
              "node_identity": dict(zip(("namespace", "service_account"), node_identity)) if node_identity else None}
    (home / "publisher.json").write_text(json.dumps(config, indent=1) + "\n")
    (home / READY_FILE).unlink(missing_ok=True)
    environment = {**os.environ, **(env or {})}
    environment["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), environment.get("PYTHONPATH", "")) if p)
    # held: a Ctrl-C between the start and the pid file would leave it running where stop_publisher never looks
    with open(home / LOG_FILE, "ab") as log, interrupts_held():
        proc = subprocess.Popen([sys.executable, "-m", "fake_gpus.machine.kwok_publisher", "--config", str(home / "publisher.json")],
                                stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=environment,
                                start_new_session=True)  # a Ctrl-C of `up` must not reach it half-way
        (home / PID_FILE).write_text(f"{proc.pid}\n")
    return proc


def wait_publisher(home: Path, proc: subprocess.Popen) -> int:
    """Return the publisher's pid once its first publish is done.

    Raises RuntimeError with the publisher's last log line if it exits first."""
    deadline = time.monotonic() + START_TIMEOUT
    # not a Kubernetes object, so no watch: the process signals readiness with a file
    while not (home / READY_FILE).exists():
        if proc.poll() is not None:
            lines = (home / LOG_FILE).read_text(errors="replace").strip().splitlines() or ["no output"]
            raise RuntimeError(f"the ResourceSlice publisher exited ({proc.returncode}): {lines[-1]} (log: {home / LOG_FILE})")
        if time.monotonic() > deadline:
            stop_publisher(home)
            raise RuntimeError(f"the ResourceSlice publisher did not finish its first publish in {START_TIMEOUT:.0f}s")
        time.sleep(0.05)
    return proc.pid


def start_publisher(home: Path, kubeconfig: Path, env: dict[str, str] | None = None,
                    node_identity: tuple[str, str] | None = None) -> int:
    """Start the publisher for a running cluster and return its pid once its first publish is done."""
    return wait_publisher(home, spawn_publisher(home, kubeconfig, env, node_identity))


def stop_publisher(home: Path, grace: float = 10.0) -> None:
    """SIGTERM the recorded publisher, SIGKILL it after `grace` seconds; forget its pid."""
    try:
        pid = int((home / PID_FILE).read_text().strip())
    except (OSError, ValueError):
        return
    terminate(pid, grace)
    (home / PID_FILE).unlink(missing_ok=True)

