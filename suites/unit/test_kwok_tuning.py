"""The large-fleet tuning of KWOK beds: the scheduler's feature gates per minor."""

from __future__ import annotations

import pytest

from testbed.clusters.features import feature_gates
from testbed.clusters.kwok.tuning import component_patches

GIB = 2**30


def _scheduler_gates(minor: str) -> dict[str, str]:
    flag = component_patches(True, gates=feature_gates(minor), memory=16 * GIB)["kube-scheduler"]["overrides"]["feature-gates"]
    return dict(item.split("=") for item in flag.split(","))


@pytest.mark.parametrize("minor", ["1.35", "1.36"])
def test_the_taint_rules_gate_goes_with_the_taints_gate(minor: str) -> None:
    # a 1.35/1.36 scheduler exits at start with DRADeviceTaintRules on and DRADeviceTaints off
    gates = _scheduler_gates(minor)
    assert gates["DRADeviceTaints"] == "false" and gates["DRADeviceTaintRules"] == "false", gates


def test_a_gate_the_minor_lacks_is_never_named() -> None:
    gates = _scheduler_gates("1.34")
    assert gates["DRADeviceTaints"] == "false" and "DRADeviceTaintRules" not in gates, gates


def test_small_beds_are_left_alone() -> None:
    assert component_patches(False, gates=feature_gates("1.35")) == {}
