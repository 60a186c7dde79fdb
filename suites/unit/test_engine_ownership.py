"""`dra-testbed image build` stops the dockerd it started, and only that one: a dockerd that was running
before (someone else's, or ours from another run) stays. A sleeping process stands for dockerd; its pid file
is the one ensure_engine writes, under a state directory of the test's own."""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostenv.processes import alive
from testbed.host.docker import dockerd
from testbed.cli import image as image_cli


@pytest.fixture
def engine(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    """Start a stand-in dockerd and record it as ours; yields a function that does so."""
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path / "state"))
    monkeypatch.setattr(dockerd, "_started_here", set())
    # no container runs on the stand-in (the real CLI would ask the machine's engine)
    monkeypatch.setattr(dockerd, "docker", lambda *a, **k: subprocess.CompletedProcess(a, 0, "", ""))
    started: list[subprocess.Popen] = []

    def start(by_this_process: bool) -> int:
        proc = subprocess.Popen(["sleep", "600"], start_new_session=True)
        started.append(proc)
        dockerd.run_dir().mkdir(parents=True, exist_ok=True)
        (dockerd.run_dir() / "dockerd.pid").write_text(str(proc.pid))
        if by_this_process:
            dockerd._started_here.add(proc.pid)
        return proc.pid

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def _build_args() -> argparse.Namespace:
    return argparse.Namespace(k8s="1.34", offline=True, rebuild=False, node_only=True)


class _Image:
    reference = "dra-testbed/node:test"


def test_image_build_stops_the_dockerd_it_started(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = []
    monkeypatch.setattr("testbed.clusters.kind.images.node_image.ensure_node_image",
                        lambda *a, **k: (pids.append(engine(by_this_process=True)), _Image())[1])
    assert image_cli.cmd_image_build(_build_args()) == 0
    _wait_gone(pids[0])
    assert not (dockerd.run_dir() / "dockerd.pid").exists()


def test_image_build_stops_it_on_failure_too(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    pids = []

    def fails(*a, **k):
        pids.append(engine(by_this_process=True))
        raise KeyboardInterrupt  # what a signal handler raises mid-build

    monkeypatch.setattr("testbed.clusters.kind.images.node_image.ensure_node_image", fails)
    with pytest.raises(KeyboardInterrupt):
        image_cli.cmd_image_build(_build_args())
    _wait_gone(pids[0])


def test_image_build_leaves_a_dockerd_that_ran_before(engine, monkeypatch: pytest.MonkeyPatch) -> None:
    before = engine(by_this_process=False)  # another run's (or started by hand): not this process's
    monkeypatch.setattr("testbed.clusters.kind.images.node_image.ensure_node_image", lambda *a, **k: _Image())
    assert image_cli.cmd_image_build(_build_args()) == 0
    assert alive(before) and dockerd.started_pid() == before


def _wait_gone(pid: int) -> None:
    import time

    deadline = time.monotonic() + 30
    while alive(pid) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not alive(pid), f"the dockerd stand-in {pid} still runs"


def test_a_niced_caller_starts_the_engine_at_normal_priority() -> None:
    """The shared engine must not inherit one niced job's priority (every kind node would run at it)."""
    code = ("import os, subprocess, sys; os.nice(7); from testbed.host.docker.dockerd import at_normal_priority; "
            "p = subprocess.Popen(at_normal_priority(['sleep', '30'])); import time; time.sleep(0.3); "
            "print(open(f'/proc/{p.pid}/stat').read().rsplit(')', 1)[1].split()[16]); p.kill()")
    nice = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.strip()
    assert nice == ("0" if os.geteuid() == 0 else "7")
