"""The reference model on its own (no cluster): counter arithmetic, firstAvailable, All, constraints,
admin access, and agreement between the model's search and its own allocation checker."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from fake_gpus.driver.identity import DriverIdentity
from testbed.workloads.devices import Inventory, Version
from testbed.workloads.model import ClaimSpec, MatchAttribute, PodSpec, Request, SubRequest
from testbed.workloads.oracle import Result, Usage, all_solutions, check_claim, check_usage, class_selectors, first_solution
from testbed.workloads.selectors import from_description
from testbed.workloads.strategies import claim_specs, gpu_atoms, mig_atoms, pod_specs, selectors

ID = DriverIdentity()
CLASSES = class_selectors(ID)
DRIVER = ID.driver


def _gpu(name: str, product: str, memory: str, consumes: dict | None = None, mig: str | None = None) -> dict:
    attributes = {"type": {"string": "mig" if mig else "gpu"}, "productName": {"string": product},
                  "driverVersion": {"version": "580.95.5"}}
    if mig:
        attributes["profile"] = {"string": mig}
    device = {"name": name, "attributes": attributes, "capacity": {"memory": {"value": memory}}}
    if consumes is not None:
        device["consumesCounters"] = [{"counterSet": "gpu-0-counter-set", "counters": {k: {"value": v} for k, v in consumes.items()}}]
    return device


def _slice(node: str, devices: list[dict], counters: dict | None = None) -> dict:
    spec = {"driver": DRIVER, "nodeName": node, "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": devices}
    if counters:
        spec["sharedCounters"] = [{"name": "gpu-0-counter-set", "counters": {k: {"value": v} for k, v in counters.items()}}]
    return {"metadata": {"name": f"{node}-slice"}, "spec": spec}


def _partitionable(node: str = "dyn") -> Inventory:
    """One GPU of four memory slices: the full GPU, two halves, four quarters."""
    full = {f"memory-slice-{i}": "1" for i in range(4)}
    devices = [_gpu("gpu-0", "P", "80Gi", dict(full))]
    for start in (0, 2):
        devices.append(_gpu(f"gpu-0-mig-2g-{start}-{start + 1}", "P", "40Gi", {f"memory-slice-{start}": "1", f"memory-slice-{start + 1}": "1"}, mig="2g"))
    for start in range(4):
        devices.append(_gpu(f"gpu-0-mig-1g-{start}", "P", "20Gi", {f"memory-slice-{start}": "1"}, mig="1g"))
    return Inventory.from_slices([_slice(node, devices, full)])


def _wants(*alternatives: SubRequest, first_available: bool = False) -> ClaimSpec:
    return ClaimSpec((Request("r", tuple(alternatives), first_available),))


def _profile(name: str, profile: str | None, count: int = 1) -> SubRequest:
    if profile is None:
        return SubRequest(name, ID.gpu_class, count=count)
    return SubRequest(name, ID.mig_class, (from_description({"string": "profile", "op": "==", "value": profile}),), count=count)


def _held(inventory: Inventory, *names: str) -> Usage:
    return Usage.of(inventory, [("other", [Result("r", next(d for d in inventory.devices if d.device == n)) for n in names])])


def test_counters_exclude_the_full_gpu_while_a_partition_is_held() -> None:
    inventory = _partitionable()
    usage = _held(inventory, "gpu-0-mig-1g-3")
    assert first_solution(inventory, "dyn", [_wants(_profile("a", None))], usage, CLASSES) is None
    assert first_solution(inventory, "dyn", [_wants(_profile("a", "2g"))], usage, CLASSES) is not None
    # three 1g fit beside the held one, a fourth does not
    assert first_solution(inventory, "dyn", [_wants(_profile("a", "1g", count=3))], usage, CLASSES) is not None
    assert first_solution(inventory, "dyn", [_wants(_profile("a", "1g", count=4))], usage, CLASSES) is None


def test_counters_return_exactly_when_released() -> None:
    inventory = _partitionable()
    assert not Usage.of(inventory, []).consumed
    assert first_solution(inventory, "dyn", [_wants(_profile("a", None))], Usage.of(inventory, []), CLASSES) is not None


def test_first_available_picks_the_first_alternative_that_fits() -> None:
    inventory = _partitionable()
    claim = _wants(_profile("full", None), _profile("half", "2g"), _profile("quarter", "1g"), first_available=True)
    assert first_solution(inventory, "dyn", [claim], Usage.of(inventory, []), CLASSES).choices == ((0,),)
    assert first_solution(inventory, "dyn", [claim], _held(inventory, "gpu-0-mig-1g-0"), CLASSES).choices == ((1,),)
    assert first_solution(inventory, "dyn", [claim], _held(inventory, "gpu-0-mig-1g-0", "gpu-0-mig-1g-2"), CLASSES).choices == ((2,),)


def test_first_available_choice_is_lexicographic_over_requests() -> None:
    # r0 would fit as a half, but then r1 (a half) has no room: the search must back off to a quarter for r0
    inventory = _partitionable()
    usage = _held(inventory, "gpu-0-mig-1g-0")
    claim = ClaimSpec((Request("r0", (_profile("half", "2g"), _profile("quarter", "1g")), True),
                       Request("r1", (_profile("half", "2g"),))))
    assert first_solution(inventory, "dyn", [claim], usage, CLASSES).choices == ((1, 0),)


def test_all_fails_when_one_matching_device_is_in_use() -> None:
    inventory = _partitionable()
    all_quarters = SubRequest("a", ID.mig_class, (from_description({"string": "profile", "op": "==", "value": "1g"}),), all_devices=True)
    assert len(first_solution(inventory, "dyn", [_wants(all_quarters)], Usage.of(inventory, []), CLASSES).results[0]) == 4
    assert first_solution(inventory, "dyn", [_wants(all_quarters)], _held(inventory, "gpu-0-mig-1g-1"), CLASSES) is None


def test_match_attribute_needs_the_attribute_on_every_device() -> None:
    inventory = _partitionable()
    both = ClaimSpec((Request("r0", (_profile("a", "1g"),)), Request("r1", (_profile("b", None),))),
                     (MatchAttribute(f"{DRIVER}/profile"),))
    assert first_solution(inventory, "dyn", [both], Usage.of(inventory, []), CLASSES) is None
    same = ClaimSpec((Request("r0", (_profile("a", "1g", count=2),)),), (MatchAttribute(f"{DRIVER}/profile"),))
    assert first_solution(inventory, "dyn", [same], Usage.of(inventory, []), CLASSES) is not None


def test_admin_access_may_take_a_device_in_use_but_not_twice_in_one_claim() -> None:
    inventory = Inventory.from_slices([_slice("w", [_gpu("gpu-0", "P", "80Gi")])])
    usage = _held(inventory, "gpu-0")
    plain = _wants(SubRequest("a", ID.gpu_class))
    admin = _wants(SubRequest("a", ID.gpu_class, admin_access=True))
    assert first_solution(inventory, "w", [plain], usage, CLASSES) is None
    assert first_solution(inventory, "w", [admin], usage, CLASSES) is not None
    assert first_solution(inventory, "w", [_wants(SubRequest("a", ID.gpu_class, count=2, admin_access=True))], usage, CLASSES) is None


def test_versions_compare_by_semver_precedence() -> None:
    assert Version.parse("580.95.5") > Version.parse("580.9.50")
    assert Version.parse("1.0.0-rc.1") < Version.parse("1.0.0")
    assert Version.parse("1.0.0-2") < Version.parse("1.0.0-rc")


def _inventories() -> st.SearchStrategy:
    whole = st.lists(st.sampled_from([("A", "80Gi"), ("B", "141Gi"), ("C", "180Gi")]), min_size=1, max_size=4)
    return st.tuples(whole, st.booleans()).map(
        lambda t: Inventory.from_slices([_slice("w", [_gpu(f"gpu-{i}", p, m) for i, (p, m) in enumerate(t[0])])]
                                        + ([_slice("dyn", [dict(d, name=d["name"]) for d in _raw_partitionable()],
                                                   {f"memory-slice-{i}": "1" for i in range(4)})] if t[1] else [])))


def _raw_partitionable() -> list[dict]:
    full = {f"memory-slice-{i}": "1" for i in range(4)}
    return [_gpu("gpu-0", "P", "80Gi", full)] + [
        _gpu(f"gpu-0-mig-1g-{i}", "P", "20Gi", {f"memory-slice-{i}": "1"}, mig="1g") for i in range(4)]


@settings(max_examples=150, deadline=None)
@given(inventory=_inventories(), claims=st.lists(claim_specs(max_requests=2, identity=ID, admin=True), min_size=1, max_size=2))
def test_every_solution_of_the_search_passes_the_checker(inventory, claims) -> None:
    """The model's two halves agree: what the search allocates, the soundness checker accepts."""
    for node in inventory.nodes():
        solutions = all_solutions(inventory, node, claims, Usage.of(inventory, []), CLASSES, limit=50)
        first = first_solution(inventory, node, claims, Usage.of(inventory, []), CLASSES)
        assert (first is None) == (not solutions)
        for solution in solutions:
            allocations = []
            for index, (claim, results) in enumerate(zip(claims, solution.results)):
                assert check_claim(inventory, claim, results, node, CLASSES, f"c{index}") == []
                allocations.append((f"c{index}", results))
            assert check_usage(inventory, allocations) == []


@given(selector=selectors(gpu_atoms() | mig_atoms()))
def test_selectors_round_trip_through_bundles(selector) -> None:
    assert from_description(selector.describe()) == selector
    assert selector.cel(DRIVER).count("(") == selector.cel(DRIVER).count(")")


@given(pod=pod_specs("p0", shared=("shared1",), identity=ID))
def test_pods_round_trip_through_bundles(pod) -> None:
    assert PodSpec.from_description(pod.describe()) == pod
    manifests = pod.manifests(DRIVER)
    assert manifests[-1]["kind"] == "Pod" and len(manifests) == 1 + sum(1 for c in pod.claims if c.template)
