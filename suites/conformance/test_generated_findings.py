"""sched.generated reads its finding out of Hypothesis' exception groups (several distinct failures in one run)."""

from __future__ import annotations

import tempfile
from types import SimpleNamespace

import pytest

from testbed.conformance import generated as module
from testbed.conformance.generated import _finding
from testbed.conformance.outcome import CheckFailed
from testbed.workloads.runner import PropertyFailure


def test_a_property_failure_inside_nested_groups_is_the_finding() -> None:
    failure = PropertyFailure([], None)
    group = ExceptionGroup("two bugs", [AssertionError("model"), ExceptionGroup("inner", [ValueError("x"), failure])])
    assert _finding(group) is failure


def test_an_assertion_is_the_finding_when_no_property_failed() -> None:
    wrong = AssertionError("DeviceClasses the model cannot stand for")
    assert _finding(ExceptionGroup("one", [wrong])) is wrong


def test_anything_else_is_no_finding() -> None:
    assert _finding(ExceptionGroup("bugs of ours", [ValueError("x")])) is None
    assert _finding(KeyError("x")) is None


def test_its_bundle_scratch_is_removed_with_a_finding_and_without(tmp_path, monkeypatch) -> None:
    """Each run's bundles live in a scratch directory of their own: a finding's files go to the evidence, the
    directory goes (117 `conformance-bundle-*` directories had piled up in /tmp)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setattr(module, "layout_yaml", lambda layout: "name: x\nnodes: []\n")
    evidence = SimpleNamespace(files={}, write=lambda name, body: evidence.files.__setitem__(name, body))
    subject = SimpleNamespace(driver="gpu.nvidia.com", layout=object(), api=None)

    def finds(api, layout, bundle, **_):
        bundle.mkdir(parents=True)
        (bundle / "steps.yaml").write_text("steps: []\n")
        raise PropertyFailure([], str(bundle))

    monkeypatch.setattr(module, "allocation_machine", finds)
    monkeypatch.setattr(module, "run_state_machine_as_test", lambda machine, settings: None)
    with pytest.raises(CheckFailed):
        module.generated(subject, evidence)  # type: ignore[arg-type]
    # the machine "found" while being made: its bundle reached the evidence, the scratch is gone
    assert evidence.files["bundle/steps.yaml"] == "steps: []\n"
    assert list(tmp_path.iterdir()) == []

    monkeypatch.setattr(module, "allocation_machine", lambda *a, **k: (_ for _ in ()).throw(KeyError("ours")))
    with pytest.raises(KeyError):
        module.generated(subject, evidence)  # type: ignore[arg-type]
    assert list(tmp_path.iterdir()) == []
