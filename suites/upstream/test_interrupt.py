"""Stopping `dra-testbed upstream-e2e` mid-run: a SIGTERM reaches ginkgo's workers, they clean up and report, and
no process of the run is left behind.

The ginkgo CLI does not pass a signal on to its parallel workers (a terminal's Ctrl-C reaches them through the
foreground process group, a runner's SIGTERM to dra-testbed would not): before the runner forwarded it to the
group, this run went on until its last spec and the workers outlived the command.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hostenv.processes import alive, stop_group
from testbed.upstream.run import INTERRUPT_GRACE

# the control-plane group: minutes of specs at two processes, so the signal lands while several still run
FOCUS = r"\[DRA\] control plane"
STARTED = 240.0  # seconds for the dry run, ginkgo and the first finished spec, on a loaded machine
STOPPED = INTERRUPT_GRACE + 30.0  # the grace, then SIGTERM/SIGKILL of what is left, then the summary line


def _descendants(root: int) -> dict[int, str]:
    """pid -> argv[0] of every live process below `root`, from /proc."""
    parent: dict[int, int] = {}
    program: dict[int, str] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            argv0 = (stat.parent / "cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except (OSError, IndexError):
            continue
        pid = int(stat.parent.name)
        parent[pid], program[pid] = int(fields[1]), argv0
    found: dict[int, str] = {}
    frontier = [root]
    while frontier:
        pid = frontier.pop()
        for child, ppid in parent.items():
            if ppid == pid and child not in found:
                found[child] = program[child]
                frontier.append(child)
    return found


def _wait_for(what: str, predicate, timeout: float, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            pytest.fail(f"upstream-e2e exited ({proc.returncode}) before {what}")
        if time.monotonic() > deadline:
            pytest.fail(f"no {what} within {timeout:.0f}s")
        time.sleep(1.0)


def test_sigterm_reaches_ginkgo_workers_and_leaves_nothing(testbed, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    opts = request.config.option
    log = (tmp_path / "upstream.log").open("w")
    cmd = [sys.executable, "-m", "testbed.cli", "upstream-e2e", "--kubeconfig", str(testbed.kubeconfig), "--k8s", opts.k8s,
           "--procs", "2", "--focus", FOCUS, "--report", str(tmp_path), "--timeout", "20"]
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        workers: dict[int, str] = {}

        def running() -> bool:  # two workers up and one spec reported done: the signal lands mid-suite
            workers.update(_descendants(proc.pid))
            e2e = tmp_path / "e2e.log"
            done = e2e.is_file() and any(line.startswith("•") for line in e2e.read_text(errors="replace").splitlines())
            return done and sum(p.endswith("e2e.test") for p in workers.values()) >= 2

        _wait_for("spec finished by two ginkgo workers", running, STARTED, proc)
        workers.update(_descendants(proc.pid))
        assert any(p.endswith("/ginkgo") for p in workers.values()), workers
        sent = time.monotonic()
        os.kill(proc.pid, signal.SIGTERM)
        try:
            code = proc.wait(timeout=STOPPED)
        except subprocess.TimeoutExpired:
            pytest.fail(f"upstream-e2e still running {STOPPED:.0f}s after SIGTERM (log: {tmp_path / 'e2e.log'})")
        took = time.monotonic() - sent
    finally:
        if proc.poll() is None:
            stop_group(proc.pid)
        log.close()
    output = (tmp_path / "upstream.log").read_text(errors="replace")
    assert code == 128 + signal.SIGTERM, f"exit {code}: {output[-500:]}"
    assert "interrupted (SIGTERM)" in output, output[-500:]
    left = {pid: prog for pid, prog in workers.items() if alive(pid)}
    assert not left, f"left running after upstream-e2e exited: {left}"
    # the workers got the signal: a spec was interrupted, after one had passed. Ginkgo writes report.json once the
    # workers report back; when one dies in upstream's own cleanup first (seen on 1.34: dra/utils/deploy.go calls
    # DeferCleanup inside a DeferCleanup callback), the report is empty and ginkgo says why, and what the
    # workers streamed to e2e.log is the record
    report = json.loads((tmp_path / "report.json").read_text())
    states = [spec["State"] for suite in report for spec in suite.get("SpecReports") or []]
    if report:
        assert "interrupted" in states or report[0].get("SpecialSuiteFailureReasons"), (took, states)
        assert any(state == "passed" for state in states), states
    else:
        specs = [line for line in (tmp_path / "e2e.log").read_text(errors="replace").splitlines() if line.startswith("•")]
        assert "timed out waiting for all parallel procs to report back" in (tmp_path / "e2e.log").read_text(errors="replace")
        assert any("[INTERRUPTED]" in line for line in specs), (took, specs)
        assert any(re.match(r"• \[[0-9.]+ seconds\]", line) for line in specs), specs
