"""The Docker engine kind runs on: use a running one, else start Debian's dockerd with our own settings.

A dockerd we start keeps its data under the dra-testbed cache (so built images survive between
sessions), records its pid under the state dir, and runs containers through the capability-dropping
runtime in capdrop_runtime.py, which lets `--privileged` containers start on hosts with a reduced
capability bounding set.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

from hostenv.dirs import cache_root, state_root
from hostenv.mounts import mounted_below, unmount_below
from hostenv.processes import terminate
from testbed.errors import EnvironmentProblem
from testbed.host import hostdeps, progress
from testbed.host.docker import firewall as engine_firewall

RUNTIME_NAME = "dra-testbed-runc"
START_TIMEOUT = 60.0
EXEC_ROOT = Path("/run/dra-testbed-docker")
BRIDGE = "docker0"  # the default bridge every dockerd makes and, stopped, leaves behind
_started_here: set[int] = set()  # pids of the dockerds this process started


class DockerError(EnvironmentProblem):
    """The Docker engine is missing, would not start, or a docker command failed."""


def engine_dir() -> Path:
    """Settings, runtime wrapper and data root of a dockerd we start (under the cache: images persist)."""
    return cache_root() / "docker"


def run_dir() -> Path:
    """Pid file and log of a dockerd we started."""
    return state_root() / "docker"


def docker(*args: str, check: bool = True, timeout: float | None = 600, capture: bool = True,
           input: str | None = None) -> subprocess.CompletedProcess:
    """Run the docker CLI; DockerError with its last line of stderr when `check` and it fails."""
    if not shutil.which("docker"):
        raise DockerError("no `docker` command on PATH: install the docker client (Debian: docker.io)")
    out = subprocess.run(["docker", *args], capture_output=capture, text=True, timeout=timeout, input=input)
    if check and out.returncode != 0:
        last = (out.stderr or out.stdout or "").strip().splitlines()[-1:] or ["no output"]
        raise DockerError(f"docker {' '.join(args[:2])} failed: {last[0]}")
    return out


def engine_running() -> bool:
    """Whether a Docker engine answers on the client's default endpoint."""
    if not shutil.which("docker"):
        return False
    return subprocess.run(["docker", "info", "--format", "{{.ServerVersion}}"], capture_output=True, timeout=30).returncode == 0


def install_engine() -> None:
    """Install Debian's docker.io (testbed.host.hostdeps: apt-get as root, else one line on how to)."""
    try:
        hostdeps.ensure("docker")
    except hostdeps.HostDepsMissing as exc:
        raise DockerError(str(exc)) from exc


def write_runtime(real_runc: str) -> Path:
    """Install the capability-dropping runtime as a standalone script pointing at `real_runc`."""
    source = (Path(__file__).parent / "capdrop_runtime.py").read_text()
    source = source.replace('DEFAULT_RUNC = "/usr/sbin/runc"', f"DEFAULT_RUNC = {real_runc!r}")
    # dockerd's shims run it with a sparse environment: pin the interpreter, isolate it from site dirs
    source = source.replace("#!/usr/bin/env python3", f"#!{sys.executable} -I", 1)
    path = engine_dir() / RUNTIME_NAME
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(source)
    path.chmod(0o755)
    return path


def write_daemon_config(runtime: Path) -> Path:
    """daemon.json: our data root, our runtime as the default one."""
    config = {
        "data-root": str(engine_dir() / "data"),
        "exec-root": str(EXEC_ROOT),
        "pidfile": str(run_dir() / "dockerd.daemon.pid"),  # dockerd's own; ours is dockerd.pid
        "runtimes": {RUNTIME_NAME: {"path": str(runtime)}},
        "default-runtime": RUNTIME_NAME,
        "storage-driver": "overlay2",
        "log-driver": "json-file",
        "log-opts": {"max-size": "20m", "max-file": "2"},
    }
    path = engine_dir() / "daemon.json"
    path.write_text(json.dumps(config, indent=2) + "\n")
    return path


def started_pid() -> int | None:
    """Pid of the dockerd we started, if it is still alive."""
    try:
        pid = int((run_dir() / "dockerd.pid").read_text().strip())
        os.kill(pid, 0)
    except (OSError, ValueError):
        return None
    return pid


def at_normal_priority(argv: list[str]) -> list[str]:
    """`argv` run at nice 0 when the caller is niced and may lower it (root): the engine outlives the command
    and serves every cluster on the machine, so it must not keep one niced job's priority (seen: a dockerd
    started under `nice -n 15` ran every kind node at 15)."""
    current = os.getpriority(os.PRIO_PROCESS, 0)
    if current > 0 and os.geteuid() == 0 and shutil.which("nice"):
        return ["nice", "-n", str(-current), *argv]  # nice execs argv: the pid stays the engine's
    return argv


def ensure_engine() -> str:
    """Make a Docker engine answer; returns "running" (someone else's or ours) or "started" (just now)."""
    if engine_running():
        return "running"
    if not shutil.which("dockerd"):
        install_engine()
    dockerd = shutil.which("dockerd") or "/usr/sbin/dockerd"
    real_runc = shutil.which("runc") or "/usr/sbin/runc"
    config = write_daemon_config(write_runtime(real_runc))
    run_dir().mkdir(parents=True, exist_ok=True)
    log = run_dir() / "dockerd.log"
    with progress.step(f"starting dockerd (log: {log})") as step, log.open("a") as sink:
        remember_bridge()  # before our dockerd makes it
        engine_firewall.remember(firewall_marker())
        proc = subprocess.Popen(at_normal_priority([dockerd, "--config-file", str(config)]), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, start_new_session=True)
        (run_dir() / "dockerd.pid").write_text(str(proc.pid))
        _started_here.add(proc.pid)
        deadline = time.monotonic() + START_TIMEOUT
        while not engine_running():
            if proc.poll() is not None:
                raise DockerError(f"dockerd exited with {proc.returncode}; see {log}")
            if time.monotonic() > deadline:
                stop_engine()
                raise DockerError(f"dockerd did not answer within {START_TIMEOUT:.0f}s; see {log}")
            step.update("waiting for the API")
            time.sleep(0.5)
    return "started"


def stop_engine(timeout: float = 30.0) -> bool:
    """Stop the dockerd this project started (never someone else's); True when one was stopped."""
    pid = started_pid()
    if pid is None:
        return False
    terminate(pid, grace=timeout)  # dockerd stops the containerd it manages on SIGTERM
    try:  # dockerd runs in a session of its own: whatever it left in that group goes too
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    (run_dir() / "dockerd.pid").unlink(missing_ok=True)
    unmount_engine()
    remove_bridge_made()
    engine_firewall.take_back(firewall_marker())
    return True


def firewall_marker() -> Path:
    """The firewall as it was before our dockerd started (engine_firewall)."""
    return run_dir() / "firewall-before.json"


def _link_exists(name: str) -> bool:
    return Path("/sys/class/net", name).exists()


def remember_bridge() -> None:
    """Note, before our dockerd starts, whether the default bridge will be its own to remove once it stops."""
    marker = run_dir() / "bridge-made"
    if _link_exists(BRIDGE):
        marker.unlink(missing_ok=True)
    else:
        marker.write_text(BRIDGE + "\n")


def remove_bridge_made() -> bool:
    """Delete the default bridge our stopped dockerd made (dockerd leaves it; one that was there before stays)."""
    marker = run_dir() / "bridge-made"
    if not marker.exists() or started_pid() is not None:
        return False
    marker.unlink()
    if not _link_exists(BRIDGE):
        return False
    if not shutil.which("ip"):
        progress.note(f"our dockerd left its {BRIDGE} bridge; without iproute2's `ip` it stays (`ip link delete {BRIDGE}`)")
        return False
    done = subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        progress.note(f"could not delete the {BRIDGE} bridge our dockerd left: {done.stderr.strip()}")
    return done.returncode == 0


def engine_mounts() -> list[str]:
    """What a dockerd of ours mounts and may leave mounted once it is gone: its data root (which it
    bind-mounts onto itself to make it private) and the netns and shm mounts under its exec root."""
    return mounted_below(engine_dir() / "data") + mounted_below(EXEC_ROOT)


def unmount_engine() -> None:
    """Take down the mounts of a dockerd of ours that no longer runs (never while one does)."""
    if started_pid() is None:
        unmount_below(engine_dir() / "data")
        unmount_below(EXEC_ROOT)


def stop_engine_started_here() -> bool:
    """Stop the dockerd this very process started (not one that ran before, nor another run's), when idle."""
    pid = started_pid()
    if pid is None or pid not in _started_here:
        return False
    _started_here.discard(pid)
    return stop_engine_if_idle()


def stop_engine_if_idle() -> bool:
    """Stop the dockerd this project started when no container runs on it (another run may be using it)."""
    if started_pid() is None:
        return False
    out = docker("ps", "-q", check=False, timeout=60)
    if out.returncode == 0 and out.stdout.strip():
        progress.note("leaving dra-testbed's dockerd running: containers still run on it "
                      "(`dra-testbed image stop-engine` stops it)")
        return False
    return stop_engine()


def image_present(reference: str) -> bool:
    """Whether the engine holds an image of this name."""
    return docker("image", "inspect", reference, check=False).returncode == 0


def privileged_works(image: str) -> tuple[bool, str]:
    """Whether a `--privileged` container of `image` starts here (kind needs exactly this)."""
    out = docker("run", "--rm", "--privileged", image, "true", check=False, timeout=120)
    return out.returncode == 0, (out.stderr or "").strip()
