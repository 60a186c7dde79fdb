"""A check interrupted by Ctrl-C stops the conformance run even when a cleanup on the way out raised an exception in
the interrupt's place (seen: SIGINT 53 s into `dra-testbed conformance` ended as an "incomplete" verdict, exit 3)."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest

from testbed.conformance import run
from testbed.conformance.checks import MUST, Check
from testbed.conformance.outcome import ERROR
from testbed.host import interrupts

CHECK = Check("test.interrupted", MUST, "a check of this test", (), ("kwok",), ("gpu",), ())


class _Subject:
    backend = "kwok"
    capabilities: frozenset[str] = frozenset()

    def close(self) -> None:
        pass


def _probe_whose_cleanup_raises(subject, evidence) -> None:
    try:
        raise KeyboardInterrupt
    finally:
        raise RuntimeError("409: the namespace is being deleted")  # replaces the interrupt, as a teardown's API error does


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setitem(run.PROBES, CHECK.id, _probe_whose_cleanup_raises)
    monkeypatch.setattr(run, "_why_not", lambda check, subject: None)


def test_an_error_after_an_interrupt_stops_the_run(probe, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(interrupts, "_raised", [signal.SIGINT])  # what the handler records as it raises
    with pytest.raises(KeyboardInterrupt):
        run.run_check(CHECK, _Subject(), tmp_path)


def test_the_same_error_without_an_interrupt_is_the_suite_s_own(probe, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(interrupts, "_raised", [])
    assert run.run_check(CHECK, _Subject(), tmp_path).verdict == ERROR
