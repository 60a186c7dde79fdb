"""sched.generated reads its finding out of Hypothesis' exception groups (several distinct failures in one run)."""

from __future__ import annotations

from testbed.conformance.generated import _finding
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
