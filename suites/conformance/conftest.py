"""The conformance meta-suite: the fault matrix on KWOK beds of its own (one per fault switch).

$DRA_TESTBED_CONFORMANCE_MATRIX=full runs every fault of the table (`nox -s conformance`); otherwise
a short subset runs (`nox -s tests`). The rendered matrix is written to
$DRA_TESTBED_CONFORMANCE_OUT (default .dra-testbed/conformance) as fault-matrix.md.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

MATRIX_ENV = "DRA_TESTBED_CONFORMANCE_MATRIX"
OUT_ENV = "DRA_TESTBED_CONFORMANCE_OUT"
# the subset inside `nox -s tests`: no fault and a counters fault (the life-cycle faults, a minute each, run in the
# full matrix of `nox -s conformance`; the evolution family `roll-driver` catches restart-churn in `nox -s tests`)
SMOKE = ("none", "short-placement")


def matrix_faults() -> list[str]:
    from testbed.conformance.faultmatrix import NO_FAULT, faults

    if os.environ.get(MATRIX_ENV) == "full":
        return [NO_FAULT, *faults()]
    return list(SMOKE)


@pytest.fixture(scope="session")
def matrix_out() -> Path:
    path = Path(os.environ.get(OUT_ENV) or ".dra-testbed/conformance")
    path.mkdir(parents=True, exist_ok=True)
    return path


@pytest.fixture(scope="session")
def observed(matrix_out: Path):
    """(outcomes, record) of the fault runs: record(fault, outcomes, wall seconds) keeps a run and writes it
    (rows/<fault>.json) and the matrix so far (fault-matrix.md), so a long run shows what it has."""
    from testbed.conformance.faultmatrix import render, row_json

    runs: dict = {}
    walls: dict = {}

    def record(fault: str, outcomes, wall: float) -> None:
        runs[fault], walls[fault] = outcomes, wall
        (matrix_out / "fault-matrix.md").write_text(render(runs, walls=walls))
        rows = matrix_out / "rows"
        rows.mkdir(exist_ok=True)
        (rows / f"{fault}.json").write_text(row_json(fault, outcomes, wall))

    yield runs, record
