"""kind's process group (testbed/clusters/kind/kind_cli.py) with stand-ins for kind and the docker CLI: no docker,
no cluster. kind's `docker run`s are let finish whether kind was stopped or ended on its own; its other children go."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import pytest

from suites.processes import mentioning
from testbed.clusters.kind.kind_cli import run_kind

# `docker run ... MARK` takes 2 s to make its "container" (the file MARK); any other subcommand (`logs -f`) runs on
DOCKER = f"""#!{sys.executable}
import sys, time
if sys.argv[1] == "run":
    time.sleep(2)
    open(sys.argv[-1], "w").close()
else:
    time.sleep(600)
"""


def _stand_ins(tmp_path: Path, kind_then: str) -> Path:
    """A kind that starts a node's `docker run` and a `docker logs -f` in the background, then `kind_then`."""
    (tmp_path / "docker").write_text(DOCKER)
    kind = tmp_path / "kind"
    # kind's children get pipes of their own (Go's exec), not kind's stdout and stderr: /dev/null here
    quiet = ">/dev/null 2>&1 </dev/null &"
    kind.write_text(f"#!/bin/bash\n{tmp_path}/docker run --name node {tmp_path}/made {quiet}\n{tmp_path}/docker logs -f node {quiet}\n{kind_then}\n")
    for script in (kind, tmp_path / "docker"):
        script.chmod(0o755)
    return kind


def _left(tmp_path: Path) -> list[int]:
    """Processes still running a stand-in of this test."""
    return mentioning(str(tmp_path))


def test_kind_failing_on_one_node_returns_after_the_other_nodes_docker_runs(tmp_path: Path) -> None:
    # kind returns on the first node that failed while the others' `docker run`s go on (kind's UntilErrorConcurrent):
    # run_kind returned at once, and a container made after the teardown had listed them was left
    kind = _stand_ins(tmp_path, "exit 1")
    try:
        out = run_kind(kind, ["create", "cluster"], {"PATH": "/usr/bin:/bin"}, timeout=60)
        assert out.returncode == 1
        assert (tmp_path / "made").exists(), "run_kind returned before kind's `docker run` had made its container"
        assert _left(tmp_path) == []  # the `docker logs -f` went at once
    finally:
        for pid in _left(tmp_path):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_kind_stopped_mid_create_lets_its_docker_runs_finish_and_stops_the_rest(tmp_path: Path) -> None:
    kind = _stand_ins(tmp_path, "sleep 600")
    try:
        with pytest.raises(subprocess.TimeoutExpired):
            run_kind(kind, ["create", "cluster"], {"PATH": "/usr/bin:/bin"}, timeout=0.5)
        assert (tmp_path / "made").exists() and _left(tmp_path) == []  # kind's and `docker logs -f`'s 600 s sleeps went
    finally:
        for pid in _left(tmp_path):
            subprocess.run(["kill", "-9", str(pid)], check=False)


def test_kind_stopped_returns_though_a_process_that_left_its_group_holds_its_output(tmp_path: Path) -> None:
    # a child of kind that left kind's group (setsid) keeps kind's stdout and stderr open, and settle_group does not
    # stop it: run_kind read the pipes to their end after settling the group, for as long as that process lived
    kind = _stand_ins(tmp_path, f"setsid {tmp_path}/docker events &\nsleep 600")
    raised: list[BaseException] = []

    def run() -> None:
        try:
            run_kind(kind, ["create", "cluster"], {"PATH": "/usr/bin:/bin"}, timeout=0.5)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        worker.join(120)  # only against a hang: the read is bounded by AFTER_STOP_READ
        assert not worker.is_alive(), "run_kind still reads the pipes that the process which left kind's group holds"
        assert [type(exc) for exc in raised] == [subprocess.TimeoutExpired]
        assert (tmp_path / "made").exists()
        assert _left(tmp_path), "the process that left kind's group is gone: it held no pipe, the test proved nothing"
    finally:
        for pid in _left(tmp_path):
            subprocess.run(["kill", "-9", str(pid)], check=False)
        worker.join(30)
