"""The kind half of the fault matrix: each switch makes exactly the node-side checks tied to it fail.

Each row redeploys our driver with one switch on a kind bed (real kubelets).
$DRA_TESTBED_CONFORMANCE_MATRIX=full runs every switch tied to a node-only check over all of them
(`nox -s conformance`), on a bed of the module's own with the conformance layout; otherwise a short subset
runs inside `nox -s tests` on the session's kind bed (suites/kind_bed.py, the kind suite's): no fault and
one CDI fault over two checks, which that bed's layout (two whole H100s, a dynamic-MIG and a static-MIG one)
serves. The rendered matrix goes to $DRA_TESTBED_CONFORMANCE_OUT as kind-fault-matrix.md.
"""

from __future__ import annotations

import os
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from suites.conformance.conftest import MATRIX_ENV
from testbed.conformance.checks import BY_ID, KIND, LIFECYCLE
from testbed.conformance.faultmatrix import NO_FAULT, faults, render, row_json, run_fault_kind, runnable
from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN

pytestmark = [pytest.mark.cluster, pytest.mark.kind, pytest.mark.slow]

FULL = os.environ.get(MATRIX_ENV) == "full"
KIND_CLUSTER_ENV = "DRA_TESTBED_KIND_CLUSTER"
SMOKE_FAULTS = (NO_FAULT, "cdi-all-devices")
SMOKE_CHECKS = ("node.generated", "node.force-delete-unprepare")


def _faults() -> list[str]:
    """The rows, in order: no fault first, as the bed comes up (no redeploy); of the life-cycle faults
    (every check waits out a pod that never starts: the longest rows) one second, the others last, so a
    run cut short has already seen every check bite."""
    first, *rest = LIFECYCLE
    return [NO_FAULT, first, *sorted(set(faults(KIND)) - set(LIFECYCLE)), *rest] if FULL else list(SMOKE_FAULTS)


def _checks():
    return runnable(KIND) if FULL else [BY_ID[c] for c in SMOKE_CHECKS]


@pytest.fixture(scope="module")
def kind_cluster(request) -> Iterator:
    """The full matrix: a kind bed of the module's own, or the running one $DRA_TESTBED_KIND_CLUSTER names (e.g.
    kept by `dra-testbed conformance --backend kind --keep-cluster --name NAME`): used, then given back the
    plain driver. The smoke rows: the session's kind bed, given back the driver it ran."""
    from testbed.clusters.base import ClusterSpec
    from testbed.clusters.driver import DriverSpec
    from testbed.clusters.layout import from_flags, load_layout
    from testbed.clusters.registry import cluster_for
    from testbed.cli.conformance import DEFAULT_KIND_LAYOUT

    if not FULL:  # a second kind bed: 2.3 min more of every CI run (its bring-up, warm)
        from suites.kind_bed import LAYOUT_FLAGS

        shared = request.getfixturevalue("kind_bed").cluster
        running = DriverSpec.from_dict((shared.saved_spec() or {}).get("driver") or {})
        try:
            yield shared, from_flags(LAYOUT_FLAGS)
        finally:
            shared.deploy_driver(running)
        return
    layout = load_layout(str(DEFAULT_KIND_LAYOUT))
    name = os.environ.get(KIND_CLUSTER_ENV) or f"conf-kind-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kind", name)
    reused = cluster.exists()
    try:
        if not reused:
            cluster.create(ClusterSpec(name=name, k8s=request.config.option.k8s, layout=layout, driver=DriverSpec()))
        yield cluster, layout
    finally:
        if reused:
            cluster.deploy_driver(DriverSpec())
        else:
            cluster.delete()  # the driver is left as the last row deployed it: the bed goes anyway


@pytest.fixture(scope="module")
def kind_observed(matrix_out: Path):
    """(outcomes, wall seconds) per row; the matrix is rendered after every row (a long run shows what it has)."""
    runs: dict = {}
    walls: dict = {}

    def record(fault: str, outcomes, wall: float, redeploy: float | None = None) -> None:
        runs[fault], walls[fault] = outcomes, wall
        (matrix_out / "kind-fault-matrix.md").write_text(render(runs, KIND, walls))
        rows = matrix_out / "kind-rows"
        rows.mkdir(exist_ok=True)
        (rows / f"{fault}.json").write_text(row_json(fault, outcomes, wall, redeploy=redeploy))

    yield runs, record


@pytest.mark.parametrize("fault", _faults())
def test_exactly_the_tied_node_checks_fail(fault: str, kind_cluster, kind_observed, tmp_path, monkeypatch) -> None:
    from testbed.conformance import workload_pods

    # a pod that never starts is the finding of many rows: a minute is enough here (a healthy driver's
    # pods ran within 30 s at load 75; the suite's own default, 180 s, is for any cluster)
    monkeypatch.setattr(workload_pods, "START_TIMEOUT", 60.0)
    cluster, layout = kind_cluster
    checks = _checks()
    _, record = kind_observed
    started, timings = time.monotonic(), {}
    outcomes = run_fault_kind(fault, cluster, layout, tmp_path, checks, timings=timings)
    record(fault, outcomes, time.monotonic() - started, timings.get("redeploy"))
    by_verdict = {v: sorted(o.id for o in outcomes if o.verdict == v) for v in (FAIL, ERROR, NOT_RUN)}
    messages = {o.id: o.message for o in outcomes if o.verdict != "pass"}
    assert not by_verdict[ERROR], f"the suite itself broke: {messages}"
    assert not by_verdict[NOT_RUN], f"a kind bed of our own runs every node-side check: {messages}"
    assert set(by_verdict[FAIL]) == {c.id for c in checks if fault in c.faults}, f"{fault}: {messages}"


if FULL:  # every node-only check was seen to bite
    def test_every_node_check_failed_under_some_fault(kind_observed) -> None:
        runs, _ = kind_observed
        assert set(runs) == set(_faults()), "runs missing: run the whole module"
        bitten = {o.id for outcomes in runs.values() for o in outcomes if o.verdict == FAIL}
        assert {c.id for c in runnable(KIND)} <= bitten, f"never failed: {sorted({c.id for c in runnable(KIND)} - bitten)}"
