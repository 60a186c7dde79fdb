"""The fault matrix, generated from the check table: per fault switch of our driver, the checks that must fail.

`run_fault` brings up a KWOK bed with one switch on and runs every check KWOK can run; the kind matrix
covers the checks only real kubelets can run (`node_only`), one row per switch on a single kind bed whose
driver is redeployed with that switch (`run_fault_kind`). `render` lays expected and observed verdicts
out as a check x fault table (markdown), for the report and CI.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Mapping, Sequence

from testbed.conformance.checks import CHECKS, KIND, KWOK, Check
from testbed.conformance.outcome import Outcome

NO_FAULT = "none"


def runnable(backend: str = KWOK) -> list[Check]:
    """Checks the backend can run (with a test bed of the suite's own: every capability); for kind only
    those KWOK cannot run (the rest are proven on KWOK beds, which are cheaper)."""
    if backend == KIND:
        return [c for c in CHECKS if KIND in c.backends and KWOK not in c.backends]
    return [c for c in CHECKS if backend in c.backends]


def faults(backend: str = KWOK) -> list[str]:
    """Every fault tied to a check the backend's matrix runs, sorted."""
    return sorted({f for c in runnable(backend) for f in c.faults})


def expected_failures(fault: str, backend: str = KWOK) -> set[str]:
    """The checks that must fail with `fault` on (none for NO_FAULT)."""
    return {c.id for c in runnable(backend) if fault in c.faults}


def run_fault(fault: str, layout, k8s: str, root: Path, driver: str = "gpu.nvidia.com") -> list[Outcome]:
    """Every KWOK-runnable check on a fresh KWOK bed with `fault` on (NO_FAULT: none)."""
    from fake_gpus.driver.faults import fault_env
    from testbed.conformance.beds import kwok_bed
    from testbed.conformance.run import run_checks

    env = {} if fault == NO_FAULT else fault_env([fault])
    with kwok_bed(layout, k8s, driver, env) as (subject, _):
        return run_checks(runnable(KWOK), subject, root)


def run_fault_kind(fault: str, cluster, layout, root: Path, checks: Sequence[Check] | None = None,
                   driver: str = "gpu.nvidia.com", timings: dict[str, float] | None = None) -> list[Outcome]:
    """The kind matrix row of `fault`: our driver redeployed on the running kind bed with that switch (a
    redeploy restarts every driver pod at once, not node by node, and the next row's switch replaces this
    one directly; the caller restores the plain driver once), the node-only checks (or `checks`), then
    the dynamic-MIG GPUs reset (a leaking fault must not spill into the next row). `timings` gets the
    redeploy's seconds ("redeploy")."""
    from fake_gpus.driver.faults import fault_env
    from fake_gpus.nvml.state import reset_state_dir
    from testbed.clusters.driver import DriverSpec
    from testbed.conformance.beds import kind_subject
    from testbed.conformance.run import run_checks

    started = time.monotonic()
    cluster.deploy_driver(DriverSpec(name=driver, env={} if fault == NO_FAULT else fault_env([fault])))
    if timings is not None:
        timings["redeploy"] = time.monotonic() - started
    try:
        subject = kind_subject(cluster, layout, driver)
        try:
            return run_checks(list(checks) if checks is not None else runnable(KIND), subject, root)
        finally:
            subject.api.close()
    finally:
        for node in layout.nodes:
            if node.mode.kind == "dynamic-mig":
                reset_state_dir(cluster.home / "nodes" / node.name / "nvml")


def row_json(fault: str, outcomes: Sequence[Outcome], wall: float, **extra: float | None) -> str:
    """One fault run as JSON: its wall time (and `extra` timings, in seconds) and every check's verdict."""
    import json

    return json.dumps({"fault": fault, "wall_s": round(wall, 1), **{f"{k}_s": None if v is None else round(v, 1) for k, v in extra.items()},
                       "checks": [{"id": o.id, "verdict": o.verdict, "duration": round(o.duration, 1), "message": o.message}
                                  for o in outcomes]}, indent=1)


def render(observed: Mapping[str, Sequence[Outcome]], backend: str = KWOK, walls: Mapping[str, float] | None = None) -> str:
    """Markdown: one row per check, one column per fault run; `FAIL` where it failed, `pass`, `-` not run;
    a `!` marks a cell that differs from the table's expectation; a last row gives each run's wall time
    (`walls`: seconds per fault), when known."""
    columns = list(observed)
    lines = ["| check | " + " | ".join(columns) + " |", "|---|" + "---|" * len(columns)]
    for check in runnable(backend):
        cells = []
        for fault in columns:
            verdict = next((o.verdict for o in observed[fault] if o.id == check.id), "-")
            shown = {"fail": "FAIL", "pass": "pass", "not-run": "-", "error": "ERROR"}.get(verdict, verdict)
            expected_fail = fault in check.faults
            wrong = (verdict == "fail") != expected_fail or verdict == "error"
            cells.append(f"{shown}{' !' if wrong else ''}")
        lines.append(f"| {check.id} | " + " | ".join(cells) + " |")
    if walls:
        lines.append("| wall time | " + " | ".join(f"{walls[f]:.0f} s" if f in walls else "-" for f in columns) + " |")
    return "\n".join(lines) + "\n"
