"""Each fault switch of our driver makes exactly the checks tied to it fail; without faults every check passes."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from hostenv.processes import run_child
from suites.conformance.conftest import matrix_faults
from testbed.clusters.layout import load_layout
from testbed.cli.conformance import DEFAULT_LAYOUT
from testbed.conformance.faultmatrix import NO_FAULT, expected_failures, run_fault, runnable
from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN, Outcome

pytestmark = [pytest.mark.cluster, pytest.mark.slow]


def _through_the_cli(k8s: str, report: Path) -> list[Outcome]:
    """The no-fault row runs as a vendor would: `dra-testbed conformance`, then its report is read."""
    run = run_child([sys.executable, "-m", "testbed.cli", "conformance", "--backend", "kwok", "--k8s", k8s,
                     "--driver-name", "gpu.nvidia.com", "--report", str(report)], capture_output=True, text=True, timeout=1200)
    results = json.loads((report / "results.json").read_text())
    # node-side MUSTs cannot run on KWOK: incomplete, never a pass
    assert (run.returncode, results["verdict"]) == (3, "incomplete"), run.stderr[-3000:]
    assert all((report / name).is_file() for name in ("junit.xml", "e2e.log", "report.html", "PRODUCT.yaml"))
    kwok = {c.id for c in runnable()}
    return [Outcome(**c) for c in results["checks"] if c["id"] in kwok]


@pytest.mark.parametrize("fault", matrix_faults())
def test_exactly_the_tied_checks_fail(fault: str, request, tmp_path, observed, matrix_out) -> None:
    k8s = request.config.option.k8s
    _, record = observed
    started = time.monotonic()
    if fault == NO_FAULT:
        outcomes = _through_the_cli(k8s, matrix_out / "no-fault-report")
    else:
        outcomes = run_fault(fault, load_layout(str(DEFAULT_LAYOUT)), k8s, tmp_path)
    record(fault, outcomes, time.monotonic() - started)
    by_verdict = {v: sorted(o.id for o in outcomes if o.verdict == v) for v in (FAIL, ERROR, NOT_RUN)}
    messages = {o.id: o.message for o in outcomes if o.verdict != "pass"}
    assert not by_verdict[ERROR], f"the suite itself broke: {messages}"
    assert not by_verdict[NOT_RUN], f"a KWOK bed of our own runs every KWOK check: {messages}"
    assert set(by_verdict[FAIL]) == expected_failures(fault), f"{fault}: {messages}"
    if fault == NO_FAULT:
        assert len(outcomes) > 10


if len(matrix_faults()) > 3:  # the full matrix (nox -s conformance): every check was seen to bite
    def test_every_check_failed_under_some_fault(observed) -> None:
        runs, _ = observed
        assert set(runs) == set(matrix_faults()), "runs missing: run the whole module"
        bitten = {o.id for outcomes in runs.values() for o in outcomes if o.verdict == FAIL}
        assert {c.id for c in runnable()} <= bitten, f"never failed: {sorted({c.id for c in runnable()} - bitten)}"
