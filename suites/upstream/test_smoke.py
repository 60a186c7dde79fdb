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
from testbed.upstream.report import read_specs, will_run
from testbed.upstream.run import DEFAULT_SKIP, DRA_FOCUS, FLAKY, Selection, dry_run, run_suite

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


def test_flaky_specs_are_left_out_on_every_backend_and_nothing_else_is_on_kind(testbed, request: pytest.FixtureRequest, tmp_path: Path) -> None:
    # upstream's kind DRA jobs filter `!Flaky`; on 1.34 the Flaky spec breaks the next extended-resource spec (#133488)
    opts = request.config.option
    binary = ensure_e2e(opts.k8s)

    def selected(skip: str, folder: str) -> set[str]:
        (tmp_path / folder).mkdir()
        return set(will_run(read_specs(dry_run(binary, testbed.kubeconfig, Selection(DRA_FOCUS, skip), tmp_path / folder))))

    every, on_kind, on_kwok = selected("", "all"), selected(DEFAULT_SKIP["kind"], "kind"), selected(DEFAULT_SKIP["kwok"], "kwok")
    flaky = {name for name in every if "[Flaky]" in name}
    assert every - on_kind == flaky, f"kind's default skip leaves out more than the [Flaky] specs: {sorted(every - on_kind - flaky)}"
    assert not flaky & on_kwok and FLAKY in DEFAULT_SKIP["kwok"]
    if opts.k8s == "1.34":
        assert any("supports extended resources together with ResourceClaim" in name for name in flaky), sorted(flaky)
