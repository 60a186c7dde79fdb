"""Failing GPUs under the Hypothesis machine (testbed/workloads/health_machine.py) on a KWOK bed of our driver with
health checks on: pods come and go while GPUs fail (fatal Xid, lost) and heal and a NoExecute DeviceTaintRule drains
a device; after every step no new claim lands on a tainted device, running pods stay, heals lift the taints and the
devices take claims again, evicted pods' claims are released and the node's NVML holds nothing left behind.

`nox -s tests` runs the fixed scenario (every property once) on a correct driver; $DRA_TESTBED_HEALTH_MACHINE=full
(`nox -s health`) runs the machine and the proofs: the scenario under each fault that breaks one property fails
naming that property."""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from hypothesis import settings
from hypothesis.stateful import run_state_machine_as_test

from fake_gpus.driver.faults import fault_env
from suites.properties.conftest import PropertyBed, bring_up, bundle_dir
from testbed.clusters.features import as_flag
from testbed.clusters.kwok.tuning import CONTROLLER_MANAGER_ARGS, SCHEDULER_GATES_OFF
from testbed.clusters.layout import Layout, NodeSpec
from fake_gpus.node import parse_mode
from testbed.workloads.health_machine import failing_gpu_scenario, health_machine, live_health_runner, rules_served
from testbed.workloads.runner import PropertyFailure

pytestmark = pytest.mark.cluster

FULL = os.environ.get("DRA_TESTBED_HEALTH_MACHINE") == "full"
NODE = "hm-h100"
SCENARIO_LAYOUT = Layout((NodeSpec(NODE, "h100-80gb", 2, parse_mode("whole:health")),), name="health-scenario")
MACHINE_LAYOUT = Layout((NodeSpec("hm-h100", "h100-80gb", 2, parse_mode("whole:health")),
                         NodeSpec("hm-h200", "h200-141gb", 2, parse_mode("whole:health"))), name="health-machine")
# what breaks each property: a driver fault switch (fake_gpus/driver/faults.py), or a component the bed starts
# without (the large-fleet tuning's two halves, testbed/clusters/kwok/tuning.py)
PROOFS = {
    "taint-never-published": "failure-taints",
    "taint-wrong-effect": "failure-taints",
    "taint-never-removed": "heal-untaints",
    "scheduler-ignores-taints": "taint-respected",
    "no-eviction-controller": "noexecute-releases",
}


def _state_dirs(bed: PropertyBed) -> dict[str, object]:
    return {n.name: bed.nvml_home / "nvml" / n.name for n in bed.layout.nodes}


def _scenario(bed: PropertyBed, request) -> dict[str, int]:
    runner = live_health_runner(bed.api, bed.layout_yaml, bundle_dir(bed, request), _state_dirs(bed),
                                runner_fields=bed.machine_fields())()
    try:
        failing_gpu_scenario(runner, NODE)
    finally:
        runner.restore()
        runner.close()
    return runner.stats


def _patches(proof: str, gates: dict[str, bool]) -> dict:
    if proof == "no-eviction-controller":
        return {"kube-controller-manager": {"args": dict(CONTROLLER_MANAGER_ARGS)}}
    off = {g: False for g in (*SCHEDULER_GATES_OFF, "DRADeviceTaintRules") if g in gates}  # rules need the taints' gate
    return {"kube-scheduler": {"overrides": {"feature-gates": as_flag(dict(gates, **off))}}}


def _bed(request, layout: Layout, label: str, env: dict | None = None) -> Iterator[PropertyBed]:
    return bring_up(request, layout, label, env=env if env is not None else {})


def test_failing_gpu_scenario_holds_on_a_correct_driver(request) -> None:
    beds = _bed(request, SCENARIO_LAYOUT, "health-scenario")
    bed = next(beds)
    try:
        stats = _scenario(bed, request)
    finally:
        next(beds, None)
    print(f"health scenario: {stats}")
    assert stats.get("failed-xid") == 1 and stats.get("healed") == 1 and stats.get("evicted") == 1, stats
    assert stats.get("node-checks", 0) > 0, f"the node's NVML was never judged ({stats})"


@pytest.mark.skipif(not FULL, reason="the machine runs in `nox -s health` ($DRA_TESTBED_HEALTH_MACHINE=full)")
def test_health_machine(request) -> None:
    beds = _bed(request, MACHINE_LAYOUT, "health-machine")
    bed = next(beds)
    stats: dict[str, int] = {}
    try:
        served = rules_served(bed.api)
        make = live_health_runner(bed.api, bed.layout_yaml, bundle_dir(bed, request), _state_dirs(bed),
                                  runner_fields=bed.machine_fields(stats))
        machine = health_machine(make, {n.name: n.count for n in bed.layout.nodes}, rules=served, stats=stats)
        run_state_machine_as_test(machine, settings=settings(max_examples=settings().max_examples, stateful_step_count=10))
    finally:
        next(beds, None)
    print(f"health machine: {stats}")
    for key in ("scheduled", "failed-xid", "failed-lost", "healed", "taint-checks", *(("evicted",) if served else ())):
        assert stats.get(key, 0) > 0, f"no step of kind {key!r}: that property was never exercised ({stats})"


@pytest.mark.skipif(not FULL, reason="the proofs run in `nox -s health` ($DRA_TESTBED_HEALTH_MACHINE=full)")
@pytest.mark.parametrize("proof", sorted(PROOFS))
def test_each_property_fails_on_the_fault_that_breaks_it(proof: str, request, monkeypatch) -> None:
    from testbed.clusters.kwok import cluster as kwok_cluster

    if proof in ("scheduler-ignores-taints", "no-eviction-controller"):
        monkeypatch.setattr(kwok_cluster, "component_patches", lambda _large, gates: _patches(proof, gates))
        env: dict = {}
    else:
        env = fault_env([proof])
    beds = _bed(request, SCENARIO_LAYOUT, f"health-proof-{proof}", env)
    bed = next(beds)
    try:
        with pytest.raises(PropertyFailure) as failure:
            _scenario(bed, request)
    finally:
        next(beds, None)
    assert [v.property for v in failure.value.violations][:1] == [PROOFS[proof]], failure.value
