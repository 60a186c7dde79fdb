"""Hardware evolution with live claims (issue 12 item 7) on KWOK: our publisher and plugin on a real control plane.

`test_hardware_evolution_explicit` is the explicit example run in every CI run: a driver update with claims
allocated and prepared, a machine joining, H100 -> B200 and H200 -> GB200 replacements, mode switches with and
without live claims. `test_evolution_machine` is the generated machine (`nox -s evolution`; a smoke of it in
`nox -s tests`). `test_evolution_family_catches_its_fault` runs the explicit example with one fault switch on
each: it must fail at the step of the family that fault breaks, with the fleet's own check or, for a MIG
instance made elsewhere than allocated, the NVML check every example runs after every step (physical_watch).

All of them share one KWOK bed (a bed per fault test cost minutes each), reset before each test to the
fleet and driver it came up with (testbed.workloads.evolution_bed), so none depends on another or on order.
"""

from __future__ import annotations

import os
import sys
from typing import Iterator

import pytest
from hypothesis.stateful import run_state_machine_as_test
from kubernetes import client

from fake_gpus.driver.faults import NVML_PLACES_FAULT, fault_env
from fake_gpus.driver.identity import current_identity
from fake_gpus.node import parse_mode
from hostenv.processes import run_child
from testbed.clusters.kwok.fleet import KwokFleet
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.kubelet.process import plugin_pid
from testbed.kube.waiting import until
from testbed.workloads.bundle import default_root
from testbed.workloads.evolution_bed import SharedFleet
from testbed.workloads.evolution_machine import evolution_machine
from testbed.workloads.fleet_facts import PROPERTY as EVOLUTION
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.physical import PHYSICAL
from testbed.workloads.physical_watch import PhysicalCheck, kwok_state_dirs
from testbed.workloads.runner import BOUND_ENV, PropertyFailure
from testbed.workloads.selectors import StringIs

pytestmark = pytest.mark.cluster

LAYOUT = Layout((
    NodeSpec("h100-0", "h100-80gb", 1, Mode("whole")),
    NodeSpec("dyn-h200", "h200-141gb", 1, Mode("dynamic-mig")),
), name="properties-evolution")
FULL_ENV = "DRA_TESTBED_EVOLUTION"  # "full": the generated machine at the profile's settings (nox -s evolution)
# `nox -s tests` proves a family catches its fault on these (the NVML judge, a driver roll); the families that add,
# replace nodes or switch modes take a minute or more each and run with the machine in `nox -s evolution`
SMOKE_FAMILIES = ("arrive", "roll-driver")


@pytest.fixture(scope="module")
def shared_bed(request: pytest.FixtureRequest) -> Iterator[SharedFleet]:
    if request.config.option.kubeconfig or (request.config.option.backend or "kwok") != "kwok":
        pytest.skip("hardware evolution changes the fleet: only on a KWOK bed of the suite's own")  # allowed in suites/skips.yaml
    with request.getfixturevalue("bed")(LAYOUT, label="prop-evolution") as testbed:
        fleet = KwokFleet(testbed.cluster, testbed.api)
        yield SharedFleet(fleet, testbed.api, fleet.layout(), fleet.driver_spec())


@pytest.fixture
def evolution_bed(shared_bed: SharedFleet) -> tuple[KwokFleet, client.ApiClient]:
    """The shared bed as it came up, whichever test had it before."""
    return shared_bed.take(), shared_bed.api


def _pod(name: str, node: str, sub: SubRequest) -> PodSpec:
    return PodSpec(name, (PodClaim("t0", template=ClaimSpec((Request("r0", (sub,)),))),), node=node)


def _mig(profile: str) -> SubRequest:
    return SubRequest("r0", current_identity().mig_class, (StringIs("profile", profile),))


def _gpu() -> SubRequest:
    return SubRequest("r0", current_identity().gpu_class)


# the families in the order the explicit example reaches them, the fault each must catch, and the properties that
# may see it first (with words of their message): the fleet's checks, or every node's NVML (physical_watch, after
# every step). "arrive": a MIG instance where NVML put it, not at its allocated placement, is seen at once by NVML
# only; "depart after roll-driver": the instance a forgetful plugin leaves behind is seen by whichever of the two
# looks first after the departure.
NVML_EXTRA = (PHYSICAL, "not prepared for any claim")
FAMILY_FAULTS = {
    "arrive": (NVML_PLACES_FAULT, (NVML_EXTRA,)),
    "roll-driver": ("restart-churn", ((EVOLUTION, "churned its slices"),)),
    "depart after roll-driver": ("checkpoint-lost", ((EVOLUTION, "leaked"), NVML_EXTRA)),
    "add-node": ("joined-node-unpublished", ((EVOLUTION, "has no published device"),)),
    "replace-node": ("slices-outlive-node", ((EVOLUTION, "slices of removed hardware"),)),
    "switch-mode": ("mode-switch-ignored", ((EVOLUTION, "expected the MIG devices of layout"),)),
}


def explicit_example(machine) -> None:
    """The theme's hardware evolution, step by step; each family's step is named in `machine.family`."""
    evo = machine.evo
    machine.family = "arrive"
    machine.place(_pod("p1", "h100-0", _gpu()))
    machine.place(_pod("p2", "dyn-h200", _mig("1g.18gb")))
    machine.fleet_is_as_published()
    machine.family = "roll-driver"  # claims allocated and prepared: allocations survive, a new pod schedules
    machine.roll_driver()
    machine.family = "depart after roll-driver"  # the MIG instance prepared before the update must go with its claim
    machine.depart("p2")
    machine.fleet_is_as_published()
    machine.family = "add-node"  # a B200 machine joins
    evo.add_node(NodeSpec("join-b200", "b200-180gb", 1, Mode("whole")))
    machine.place(_pod("p3", "join-b200", _gpu()))
    machine.family = "replace-node"  # H100 -> B200 under a live claim: drained, gone, back as a B200
    evo.replace_node(NodeSpec("h100-0", "b200-180gb", 1, Mode("whole")))
    machine.family = "switch-mode"  # under a live claim: drained first, nothing stranded
    machine.place(_pod("p4", "dyn-h200", _mig("3g.71gb")))
    evo.switch_mode("dyn-h200", parse_mode("static-mig:all-balanced"))
    machine.place(_pod("p5", "dyn-h200", _mig("1g.18gb")))
    machine.depart("p5")
    evo.switch_mode("dyn-h200", parse_mode("dynamic-mig"))  # without live claims
    machine.family = "replace-node"  # H200 -> GB200, with nothing on it
    evo.replace_node(NodeSpec("dyn-h200", "gb200-186gb", 1, Mode("dynamic-mig")))
    machine.place(_pod("p6", "dyn-h200", _mig("1g.23gb")))
    machine.fleet_is_as_published()


def _physical(fleet: KwokFleet, api, stats: dict[str, int] | None = None) -> dict:
    """Every node's NVML judged against its prepared claims after every step, joined and switched nodes too."""
    check = PhysicalCheck(api, kwok_state_dirs(fleet.cluster.home), current_identity().driver,
                          stats=stats if stats is not None else {})
    return {"node_check": check}


def _machine(fleet: KwokFleet, api, tmp, context: dict | None = None, stats: dict[str, int] | None = None,
             physical: bool = True):
    return evolution_machine(fleet, api, tmp, context=context, runner_fields=_physical(fleet, api, stats) if physical else None)()


def test_evolution_machine(request) -> None:
    """Generated evolution at the Hypothesis profile's settings (`nox -s evolution`)."""
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("the generated evolution machine runs in `nox -s evolution` ($DRA_TESTBED_EVOLUTION=full)")  # allowed in suites/skips.yaml
    fleet, api = request.getfixturevalue("evolution_bed")  # only now: a skip should neither bring up nor reset a bed
    stats: dict[str, int] = {}
    machine = evolution_machine(fleet, api, default_root() / "evolution" / request.node.name, stats=stats,
                                runner_fields=_physical(fleet, api, stats))
    run_state_machine_as_test(machine)
    print(f"evolution machine: {stats}")
    assert stats.get("examples", 0) > 0, stats


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILY_FAULTS) if os.environ.get(FULL_ENV) == "full" else SMOKE_FAMILIES)
def test_evolution_family_catches_its_fault(family: str, evolution_bed, tmp_path, monkeypatch) -> None:
    fault, judges = FAMILY_FAULTS[family]
    monkeypatch.setenv(BOUND_ENV, "20")  # a check that holds does so at once; one that fails waits the bound out
    fleet, api = evolution_bed
    # switched on by a driver update before the example: a publisher started with joined-node-unpublished on
    # would not publish the bed's own nodes (they register after it starts)
    fleet.roll_driver(fault_env([fault]))
    # the NVML check only where it is the judge: elsewhere it would see the fleet check's fault too (a leak after a
    # departure) and wait out its own bound first, a minute per family; the explicit example and the generated
    # machine run it after every step
    nvml = any(judge == PHYSICAL for judge, _ in judges)
    machine = _machine(fleet, api, tmp_path / "bundle", context={"faults": fault}, physical=nvml)
    try:
        with pytest.raises(PropertyFailure) as failure:
            explicit_example(machine)
        assert machine.family == family, f"{fault} was caught at {machine.family!r}, not at {family!r}: {failure.value}"
        assert any(v.property == judge and words in v.message for v in failure.value.violations for judge, words in judges), failure.value
        assert (tmp_path / "bundle" / "steps.json").is_file()
    finally:
        machine.evo.runner.close()  # the fault stays on: the next test's reset rolls it off
    if family == "switch-mode":
        # the bundle replays on a fresh KWOK cluster (the fault switched on by a driver update) and still fails
        replay = run_child([sys.executable, "-m", "testbed.cli", "replay", str(tmp_path / "bundle")],
                           capture_output=True, text=True, timeout=900)
        assert replay.returncode == 1, replay.stderr[-2000:]
        assert "still failing" in replay.stderr and judges[0][1] in replay.stderr, replay.stderr[-2000:]


def test_a_driver_update_returns_once_the_new_plugin_runs(evolution_bed, tmp_path) -> None:
    """As a DaemonSet rollout is done once the new pods run: before, a roll returned while the stand-in
    still ran the old plugin, and a departing claim's unprepare could reach it (a checkpoint-lost fault,
    which the new plugin brings, then went unseen: seen once on a loaded CI)."""
    fleet, api = evolution_bed
    machine = _machine(fleet, api, tmp_path / "bundle")
    try:
        machine.place(_pod("p1", "dyn-h200", _mig("1g.18gb")))  # the stand-in starts the node's plugin for it
        before = until("dyn-h200's plugin running", lambda: plugin_pid(fleet.cluster.home, "dyn-h200"), timeout=120)
        fleet.roll_driver({})
        assert plugin_pid(fleet.cluster.home, "dyn-h200") not in (None, before)
    finally:
        machine.teardown()


# after the fault tests in the file's order: passing there shows a reset leaves no fault on
def test_hardware_evolution_explicit(evolution_bed, tmp_path) -> None:
    fleet, api = evolution_bed
    machine = _machine(fleet, api, tmp_path / "bundle")
    try:
        explicit_example(machine)
        ops = [s.op for s in machine.evo.runner.steps]
        assert {"roll-driver", "add-node", "replace-node", "switch-mode"} <= set(ops), ops
    finally:
        machine.teardown()
    assert {n.name: (n.board, str(n.mode)) for n in fleet.layout().nodes} == {
        "h100-0": ("b200-180gb", "whole"), "dyn-h200": ("gb200-186gb", "dynamic-mig")}
