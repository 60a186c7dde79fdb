"""The workload properties (testbed/workloads/properties.py) judged on hand-made observed states: each
check passes on a state that keeps its promise and fails on one that breaks it."""

from __future__ import annotations

import pytest

from fake_gpus.driver.identity import DriverIdentity
from testbed.workloads import properties
from testbed.workloads.devices import DeviceId, Inventory
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SharedClaim, SubRequest
from testbed.workloads.observe import ObservedClaim, Snapshot
from testbed.workloads.oracle import Result, Solution, class_selectors
from testbed.workloads.properties import PodView, World
from testbed.workloads.selectors import StringIs
from testbed.workloads.bundle_schema import BundleError, check_steps
from testbed.workloads.steps import AddNode, AddShared, Arrive, Depart, Released, ReplaceNode, RollDriver, SwitchMode, from_json

ID = DriverIdentity()
CLASSES = class_selectors(ID)
NS = "prop-test"
QUARTER = {"memory-slice-0": "1"}


def _device(name: str, kind: str, memory: str, consumes: dict[str, str], profile: str | None = None) -> dict:
    attributes = {"type": {"string": kind}, **({"profile": {"string": profile}} if profile else {})}
    return {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}},
            "consumesCounters": [{"counterSet": "cs", "counters": {k: {"value": v} for k, v in consumes.items()}}]}


def _inventory(*nodes: str) -> Inventory:
    """Per node one GPU over two memory slices: gpu-0 (both) and two 1g quarters (one each)."""
    slices = []
    for node in nodes:
        both = {"memory-slice-0": "1", "memory-slice-1": "1"}
        devices = [_device("gpu-0", "gpu", "80Gi", both),
                   _device("gpu-0-mig-1g-0", "mig", "10Gi", QUARTER, "1g"), _device("gpu-0-mig-1g-1", "mig", "10Gi", {"memory-slice-1": "1"}, "1g")]
        slices.append({"metadata": {"name": node}, "spec": {"driver": ID.driver, "nodeName": node, "devices": devices,
                       "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                       "sharedCounters": [{"name": "cs", "counters": {k: {"value": v} for k, v in both.items()}}]}})
    return Inventory.from_slices(slices)


WHOLE = ClaimSpec((Request("r", (SubRequest("r", ID.gpu_class),)),))
SMALL_FIRST = ClaimSpec((Request("r", (SubRequest("small", ID.mig_class, (StringIs("profile", "1g"),)), SubRequest("big", ID.gpu_class)), True),))


def _claim(name: str, node: str | None, *results: tuple[str, str], config: list | None = None) -> ObservedClaim:
    return ObservedClaim(NS, name, node, [Result(request, DeviceId(ID.driver, node or "n0", device)) for request, device in results],
                         config or [], [])


def _world(inventory: Inventory, claims: list[ObservedClaim], *pods: PodView) -> World:
    return World(NS, Snapshot(inventory, claims), {p.name: p for p in pods})


def _soundness(world: World, specs: dict[str, PodSpec], shared: dict | None = None) -> list:
    return properties.soundness(world, specs, shared or {}, CLASSES, ID.driver)


POD = PodSpec("p", (PodClaim("c", template=WHOLE),))


def test_soundness_holds_for_a_bound_pod_with_its_device() -> None:
    world = _world(_inventory("n0"), [_claim("p-c", "n0", ("r", "gpu-0"))], PodView("p", "n0", {"c": "p-c"}))
    assert _soundness(world, {"p": POD}) == []


@pytest.mark.parametrize(("claims", "pod_node", "message"), [
    ([], "n0", "is bound to n0 but claim p-c is not allocated"),
    ([_claim("p-c", "n1", ("r", "gpu-0"))], "n0", "allocated on n1, its pod p runs on n0"),
    ([_claim("p-c", "n0", ("r", "gpu-0-mig-1g-0"))], "n0", "p-c"),  # a MIG device for a whole-GPU request
    ([_claim("p-c", "n0", ("r", "gpu-0")), _claim("other", "n0", ("r", "gpu-0"))], "n0", "gpu-0"),  # allocated twice
], ids=["bound-unallocated", "other-node", "wrong-class", "double-allocation"])
def test_soundness_fails_on_each_broken_state(claims: list, pod_node: str, message: str) -> None:
    world = _world(_inventory("n0", "n1"), claims, PodView("p", pod_node, {"c": "p-c"}))
    problems = _soundness(world, {"p": POD})
    assert any(message in v.message for v in problems), [v.message for v in problems]


def test_config_must_reach_the_allocation() -> None:
    spec = ClaimSpec(WHOLE.requests, config=((("r",), {"sharing": "none"}),))
    carried = [dict(ClaimSpec.config_entry(("r",), {"sharing": "none"}, ID.driver), source="FromClaim")]
    assert properties.config_copied(spec, _claim("p-c", "n0", ("r", "gpu-0"), config=carried), ID.driver) == []
    problems = properties.config_copied(spec, _claim("p-c", "n0", ("r", "gpu-0")), ID.driver)
    assert [v.property for v in problems] == ["soundness"] and "config not carried" in problems[0].message


def test_completeness_and_placement() -> None:
    fits = {"n0": Solution(((),), ((0,),))}
    assert properties.completeness("p", fits, True, 30, None) == []
    assert properties.completeness("p", {}, False, 30, None) == []  # the model finds no room: rejection is right
    [violation] = properties.completeness("p", fits, False, 30, "False Unschedulable: no")
    assert violation.property == "completeness" and violation.expected == ["n0"]
    assert properties.placement("p", "n0", fits) == []
    [violation] = properties.placement("p", "n1", fits)
    assert violation.property == "soundness" and "where the model finds no room" in violation.message


def test_fallback_wants_the_first_feasible_alternative() -> None:
    pod = PodSpec("p", (PodClaim("c", template=SMALL_FIRST),))
    before = Snapshot(_inventory("n0"), [])
    first = ((0,),)  # the model's search: the 1g alternative
    took_small = Snapshot(before.inventory, [_claim("p-c", "n0", ("r/small", "gpu-0-mig-1g-0"))])
    took_big = Snapshot(before.inventory, [_claim("p-c", "n0", ("r/big", "gpu-0"))])
    solution = Solution(((),), first)
    assert properties.fallback(pod, {"c": "p-c"}, NS, {}, before, took_small, solution, "n0") == []
    [violation] = properties.fallback(pod, {"c": "p-c"}, NS, {}, before, took_big, solution, "n0")
    assert violation.property == "fallback" and (violation.expected, violation.observed) == (["r/small"], ["r/big"])
    moved = Snapshot(before.inventory, took_big.claims + [_claim("elsewhere", "n0", ("r", "gpu-0-mig-1g-1"))])
    assert properties.fallback(pod, {"c": "p-c"}, NS, {}, before, moved, solution, "n0") is None  # not judgeable


def test_liveness() -> None:
    assert properties.liveness({}, {}, 30) == []
    [violation] = properties.liveness({"p": ["n0"]}, {"p": "False Unschedulable: no"}, 30)
    assert violation.property == "liveness" and violation.expected == {"p": ["n0"]}


def test_released_node_has_nothing_allocated_and_whole_counters() -> None:
    inventory = _inventory("n0")
    assert properties.released(Snapshot(inventory, []), "n0") == []
    held = properties.released(Snapshot(inventory, [_claim("left", "n0", ("r", "gpu-0-mig-1g-0"))]), "n0")
    assert [v.property for v in held] == ["repartitioning", "repartitioning"]
    assert "still allocated" in held[0].message and "counters still consumed" in held[1].message
    assert properties.released(Snapshot(inventory, [_claim("left", "n0", ("r", "gpu-0-mig-1g-0"))]), "n1") == []


def test_shared_claims_are_judged_by_their_own_spec() -> None:
    pod = PodSpec("p", (PodClaim("c", shared="s"),))
    shared = {"s": SharedClaim("s", WHOLE)}
    good = _world(_inventory("n0"), [_claim("s", "n0", ("r", "gpu-0"))], PodView("p", "n0", {"c": "s"}))
    bad = _world(_inventory("n0"), [_claim("s", "n0", ("r", "gpu-0-mig-1g-0"))], PodView("p", "n0", {"c": "s"}))
    assert _soundness(good, {"p": pod}, shared) == [] and _soundness(bad, {"p": pod}, shared)


def test_steps_round_trip_through_their_json() -> None:
    steps = [AddShared(SharedClaim("s", SMALL_FIRST)), Arrive(POD), Depart("p"), Released("n0"),
             AddNode("n1", "b200-180gb", 2, "whole"), ReplaceNode("n0", "gb200-186gb", 1, "dynamic-mig"),
             SwitchMode("n1", "static-mig:all-balanced"), RollDriver(2)]
    assert [from_json(s.to_json()) for s in steps] == steps
    assert check_steps([s.to_json() for s in steps]) and [s.to_json()["op"] for s in steps] == [
        "shared", "arrive", "depart", "released", "add-node", "replace-node", "switch-mode", "roll-driver"]
    with pytest.raises(ValueError, match="unknown step 'nap'; valid: shared, arrive, depart, released, add-node"):
        from_json({"op": "nap"})


@pytest.mark.parametrize("step, message", [
    ({"op": "add-node", "node": "n1", "board": "a100", "count": 1, "mode": "whole"}, "unknown board 'a100'; valid boards"),
    ({"op": "replace-node", "node": "n1", "board": "gb200-186gb", "count": 9, "mode": "whole"}, "valid: 1 to 4"),
    ({"op": "switch-mode", "node": "n1", "mode": "static-mig"}, "step 1.mode"),
    ({"op": "roll-driver", "generation": "2"}, "generation: is str"),
])
def test_evolution_steps_of_a_bundle_are_checked(step: dict, message: str) -> None:
    with pytest.raises(BundleError, match=message):
        check_steps([step])
