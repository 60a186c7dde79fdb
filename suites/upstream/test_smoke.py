"""Smoke of Kubernetes' own DRA e2e suite inside `nox -s tests`: three control-plane specs of test/e2e/dra on the
session's bed, through the same runner as `dra-testbed upstream-e2e` (`nox -s upstream` runs the whole group).

e2e.test is built through the toolchain when it is not cached (a few minutes on a cold machine: the
Kubernetes packages it shares with the cluster binaries are compiled already).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.upstream import exceptions
from testbed.upstream.binary import ensure_e2e
from testbed.upstream.run import DEFAULT_SKIP, Selection, run_suite

SMOKE_FOCUS = (r"\[DRA\] (control plane \[ConformanceCandidate\] (supports claim and class parameters|must deallocate after use)"
               r"|ResourceSlice Controller creates slices)")


def test_upstream_dra_control_plane_smoke(testbed, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    opts = request.config.option
    backend = "kind" if opts.backend == "kind" else "kwok"
    binary = ensure_e2e(opts.k8s)
    summary = run_suite(binary, testbed.kubeconfig, Selection(SMOKE_FOCUS, DEFAULT_SKIP["kwok"]), tmp_path,
                        minor=opts.k8s, backend=backend, exceptions=exceptions.load(), timeout_min=15)
    assert summary.dry_run == 3, f"the smoke focus selects {summary.dry_run} specs, expected 3 (renamed upstream?)"
    assert summary.ok, f"{summary.failures or summary.missing}; log: {tmp_path / 'e2e.log'}"
    assert summary.counts["control plane"]["passed"] == 3
