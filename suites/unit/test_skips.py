"""The skip guard (testbed/pytest/skips.py): a skip the committed allowlist does not name fails the run."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import yaml

from testbed.pytest.skips import DEFAULT_ALLOWLIST, load_allowlist

REPO = Path(__file__).resolve().parents[2]
SAMPLE = '''
import pytest

def test_runs():
    pass

def test_skipped_on_purpose():
    pytest.skip("no MIG node in this layout")

@pytest.mark.xfail(reason="known", strict=True)
def test_expected_failure():
    assert False
'''


def _run(tmp_path: Path, allowed: list[dict] | None, euid: int | None = None) -> subprocess.CompletedProcess:
    """The sample under the guard with `allowed` as its allowlist; `euid`: the user id the run sees itself as."""
    (tmp_path / "test_sample.py").write_text(SAMPLE)
    if euid is not None:  # before any test runs, so the guard asks the patched one
        (tmp_path / "conftest.py").write_text(f"import os\nos.geteuid = lambda: {euid}\n")
    allowlist = tmp_path / "skips.yaml"
    if allowed is not None:
        allowlist.write_text(yaml.safe_dump(allowed))
    return subprocess.run([sys.executable, "-m", "pytest", "test_sample.py", "-q", "-p", "testbed.pytest.skips", "-p", "no:cacheprovider",
                           "--skip-allowlist", str(allowlist)], cwd=tmp_path, capture_output=True, text=True, timeout=120)


def test_an_unlisted_skip_fails_the_run(tmp_path: Path) -> None:
    run = _run(tmp_path, None)
    assert run.returncode == 1, run.stdout
    assert "test_sample.py::test_skipped_on_purpose: no MIG node in this layout" in run.stdout
    assert "1 passed, 1 skipped, 1 xfailed" in run.stdout  # the skip is still reported as one; xfail is no skip


def test_a_listed_skip_passes(tmp_path: Path) -> None:
    run = _run(tmp_path, [{"test": "test_sample.py::test_skipped_*", "reason": "the sample layout has no MIG node"}])
    assert run.returncode == 0, run.stdout


def test_an_entry_for_machines_without_root_allows_the_skip_only_there(tmp_path: Path) -> None:
    entry = {"test": "test_sample.py::test_skipped_on_purpose", "reason": "mounting needs root", "when": "not root"}
    assert _run(tmp_path, [entry], euid=1000).returncode == 0
    as_root = _run(tmp_path, [entry], euid=0)  # CI runs as root: there a skip of that test fails the run
    assert as_root.returncode == 1, as_root.stdout
    assert "test_sample.py::test_skipped_on_purpose: no MIG node in this layout" in as_root.stdout


def test_an_entry_with_an_unknown_condition_is_refused_in_one_line(tmp_path: Path) -> None:
    run = _run(tmp_path, [{"test": "test_sample.py::test_skipped_on_purpose", "reason": "why not", "when": "rootless"}])
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert "entry 1: unknown `when` 'rootless'; valid: 'not root'" in run.stderr


def test_an_entry_without_a_reason_is_refused_in_one_line(tmp_path: Path) -> None:
    run = _run(tmp_path, [{"test": "test_sample.py::test_skipped_on_purpose", "reason": " "}])
    assert run.returncode == 4, run.stdout + run.stderr  # pytest's usage error
    assert "entry 1 needs a `test` pattern and a non-empty `reason`" in run.stderr


def test_the_committed_allowlist_gives_a_reason_per_entry() -> None:
    entries = load_allowlist(REPO / DEFAULT_ALLOWLIST)
    assert entries and all(len(e.reason) > 20 for e in entries)
