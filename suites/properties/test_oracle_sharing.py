"""The reference model on shared devices (consumable capacity), no cluster: the allocator's rounding per request
policy, shares and memory limiting together, capacity given back on release, the checks that judge observed
shares, and agreement between the model's search and its checker on shared inventories.

Shareable devices are published by the driver's own rule (fake_gpus.driver.consumable_shares), so the model is
tested on exactly the bodies the bed publishes."""

from __future__ import annotations

from decimal import Decimal

from hypothesis import given, settings
from hypothesis import strategies as st

from fake_gpus.driver.consumable_shares import EXCEEDS, apply_consumable_shares
from fake_gpus.driver.identity import DriverIdentity
from testbed.workloads.capacity import CapacityPolicy, consumed_amount
from testbed.workloads.devices import DeviceId, Inventory
from testbed.workloads.model import ClaimSpec, Request, SubRequest
from testbed.workloads.oracle import Result, Usage, all_solutions, check_claim, check_usage, class_selectors, first_solution
from testbed.workloads.sharing_strategies import capacity_claim_specs
from testbed.workloads.truth import shared_memory_violations

ID = DriverIdentity()
CLASSES = class_selectors(ID)
DRIVER = ID.driver
H100 = ("NVIDIA H100 80GB HBM3", "81559Mi")
GI, MI = Decimal(2**30), Decimal(2**20)


def _gpu(name: str, product: str, memory: str) -> dict:
    return {"name": name, "attributes": {"type": {"string": "gpu"}, "productName": {"string": product}},
            "capacity": {"memory": {"value": memory}}}


def _inventory(shares: str | None, count: int = 1, faults: frozenset[str] = frozenset(), board=H100, raw: dict | None = None) -> Inventory:
    devices = [raw or apply_consumable_shares(_gpu(f"gpu-{i}", *board), shares, faults) for i in range(count)]
    spec = {"driver": DRIVER, "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1}, "devices": devices}
    return Inventory.from_slices([{"metadata": {"name": "n-slice"}, "spec": spec}])


def _asking(*capacity: tuple[str, str], count: int = 1) -> ClaimSpec:
    return ClaimSpec((Request("r", (SubRequest("r", ID.gpu_class, count=count, capacity=tuple(capacity)),)),))


def _place(inventory: Inventory, claims: list[ClaimSpec], usage: Usage | None = None):
    return first_solution(inventory, "n", claims, usage or Usage.of(inventory, []), CLASSES)


def _consumed(solution, claim: int = 0, device: int = 0) -> dict[str, Decimal]:
    return dict(solution.results[claim][device].consumed)


def _held(solution) -> Usage:
    """What the solution's claims hold once allocated (as the scheduler's results would say)."""
    return [(f"ns/c{i}", list(results)) for i, results in enumerate(solution.results)]


# --- rounding, per request policy --------------------------------------------------------------------------


def test_a_range_policy_raises_to_min_and_rounds_up_to_the_next_step() -> None:
    policy = CapacityPolicy(default=Decimal(4) * GI, minimum=Decimal(4) * GI, maximum=Decimal(40) * GI, step=Decimal(2) * GI)
    value = Decimal(80) * GI
    assert consumed_amount(Decimal(1) * GI, value, policy) == 4 * GI
    assert consumed_amount(Decimal(5) * GI, value, policy) == 6 * GI
    assert consumed_amount(Decimal(6) * GI, value, policy) == 6 * GI
    assert consumed_amount(None, value, policy) == 4 * GI  # not asked: the default
    assert not policy.allows(Decimal(42) * GI) and policy.allows(Decimal(40) * GI)


def test_valid_values_round_to_the_first_value_not_below_and_refuse_above_all() -> None:
    policy = CapacityPolicy(default=Decimal(10) * GI, valid_values=(Decimal(10) * GI, Decimal(20) * GI, Decimal(40) * GI))
    assert consumed_amount(Decimal(15) * GI, Decimal(80) * GI, policy) == 20 * GI
    above = consumed_amount(Decimal(50) * GI, Decimal(80) * GI, policy)
    assert above == 50 * GI and not policy.allows(above)


def test_no_policy_consumes_what_is_asked_or_everything() -> None:
    assert consumed_amount(Decimal(3) * GI, Decimal(80) * GI, None) == 3 * GI
    assert consumed_amount(None, Decimal(80) * GI, None) == 80 * GI


def test_nvidias_step_rounds_an_odd_request_up_to_whole_mebibytes() -> None:
    inventory = _inventory("unlimited")
    solution = _place(inventory, [_asking(("memory", "1500000k"))])  # 1.5 GB is 1430.51 MiB
    assert _consumed(solution)[f"{DRIVER}/memory"] == 1431 * MI


def test_a_policy_from_a_slice_is_what_the_allocator_reads() -> None:
    device = next(iter(_inventory("4").devices.values()))
    assert device.allow_multiple
    assert device.policies[f"{DRIVER}/shares"] == CapacityPolicy(Decimal(1), Decimal(1), Decimal(4), Decimal(1))
    assert device.policies[f"{DRIVER}/memory"].maximum == 81559 * MI


# --- what fits on one shared GPU -----------------------------------------------------------------------------


def test_shares_limit_the_claims_on_one_gpu() -> None:
    inventory = _inventory("4")
    four = _place(inventory, [_asking() for _ in range(4)])
    assert four is not None and {r.device for c in four.results for r in c} == {DeviceId(DRIVER, "n", "gpu-0")}
    assert _place(inventory, [_asking() for _ in range(5)]) is None
    assert _place(inventory, [_asking(("shares", "3")), _asking(("shares", "2"))]) is None
    assert _place(inventory, [_asking(("shares", "5"))]) is None  # above the policy's maximum


def test_memory_and_shares_limit_together() -> None:
    inventory = _inventory("4")
    # two shares only, but 50Gi twice is more memory than the GPU has
    assert _place(inventory, [_asking(("memory", "50Gi")), _asking(("memory", "50Gi"))]) is None
    assert _place(inventory, [_asking(("memory", "40Gi")), _asking(("memory", "39Gi"))]) is not None
    assert _place(inventory, [_asking(("memory", "81560Mi"))]) is None  # one MiB more than the board


def test_memory_mode_takes_the_whole_gpu_unless_asked() -> None:
    inventory = _inventory("memory")
    assert _place(inventory, [_asking(), _asking()]) is None
    assert _place(inventory, [_asking(("memory", "20Gi")) for _ in range(3)]) is not None
    assert _place(inventory, [_asking(("shares", "1"))]) is None  # memory mode publishes no shares capacity


def test_one_claim_may_take_two_shares_of_one_gpu() -> None:
    solution = _place(_inventory("4"), [_asking(("shares", "2"), count=2)])
    assert [r.device.device for r in solution.results[0]] == ["gpu-0", "gpu-0"]
    assert _place(_inventory("4"), [_asking(("shares", "3"), count=2)]) is None


def test_capacity_given_back_on_release_is_taken_again() -> None:
    inventory = _inventory("4")
    first = _place(inventory, [_asking(("memory", "60Gi"))])
    held = Usage.of(inventory, _held(first))
    assert held.shared[DeviceId(DRIVER, "n", "gpu-0")][f"{DRIVER}/memory"] == 60 * GI
    assert _place(inventory, [_asking(("memory", "30Gi"))], held) is None
    assert _place(inventory, [_asking(("memory", "30Gi"))], Usage.of(inventory, [])) is not None


def test_an_exclusive_device_still_refuses_more_capacity_than_it_has() -> None:
    inventory = _inventory(None)
    assert _place(inventory, [_asking(("memory", "40Gi"))]) is not None
    assert _place(inventory, [_asking(("memory", "90Gi"))]) is None
    assert _place(inventory, [_asking(("shares", "1"))]) is None  # not published


# --- the checks on observed shares ----------------------------------------------------------------------------


def _share(device: str, memory: Decimal, shares: Decimal | None = Decimal(1)) -> Result:
    consumed = ((f"{DRIVER}/memory", memory),) + (((f"{DRIVER}/shares", shares),) if shares is not None else ())
    return Result("r", DeviceId(DRIVER, "n", device), share_id=f"uid-{device}-{memory}", consumed=consumed)


def test_check_usage_reports_shares_holding_more_than_the_gpu_has() -> None:
    inventory = _inventory("unlimited")
    ok = [("ns/a", [_share("gpu-0", 40 * GI, None)]), ("ns/b", [_share("gpu-0", 30 * GI, None)])]
    assert check_usage(inventory, ok) == []
    over = ok + [("ns/c", [_share("gpu-0", 20 * GI, None)])]
    assert [v.double for v in check_usage(inventory, over)] == [True]


def test_check_usage_reports_a_gpu_held_whole_and_shared() -> None:
    inventory = _inventory("unlimited")
    both = [("ns/a", [_share("gpu-0", GI, None)]), ("ns/b", [Result("r", DeviceId(DRIVER, "n", "gpu-0"))])]
    assert any("whole and in shares" in v.message for v in check_usage(inventory, both))


def test_check_claim_reports_a_share_not_rounded_as_the_allocator_rounds() -> None:
    inventory = _inventory("unlimited")
    claim = _asking(("memory", "1500Mi"))
    right = [_share("gpu-0", 1500 * MI, None)]
    assert check_claim(inventory, claim, right, "n", CLASSES, "ns/a") == []
    wrong = [_share("gpu-0", 1000 * MI, None)]
    assert any("rounded" in v.message for v in check_claim(inventory, claim, wrong, "n", CLASSES, "ns/a"))
    unshared = [Result("r", DeviceId(DRIVER, "n", "gpu-0"))]
    assert any("shareID" in v.message for v in check_claim(inventory, claim, unshared, "n", CLASSES, "ns/a"))


def test_a_policy_letting_a_claim_take_more_memory_than_the_board_has_is_caught() -> None:
    assert shared_memory_violations(_inventory("unlimited"), []) == []
    faulty = _inventory("unlimited", faults=frozenset({EXCEEDS}))
    problems = shared_memory_violations(faulty, [])
    assert [v.property for v in problems] == ["soundness"] and "lets one claim take" in problems[0].message


def test_shares_adding_up_past_the_boards_real_memory_are_caught() -> None:
    # published as twice the board (the wrong-memory kind of lie): the scheduler lets shares reach 160Gi
    inventory = _inventory("unlimited", board=("NVIDIA H100 80GB HBM3", "163118Mi"))
    held = [("ns/a", [_share("gpu-0", 80 * GI, None)]), ("ns/b", [_share("gpu-0", 60 * GI, None)])]
    assert check_usage(inventory, held) == []
    assert any("shares hold" in v.message for v in shared_memory_violations(inventory, held))


# --- the model's two halves agree on shared inventories -----------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(shares=st.sampled_from(["memory", "unlimited", "1", "2", "4"]), count=st.integers(1, 2),
       claims=st.lists(capacity_claim_specs(identity=ID, boards=("h100-80gb",)), min_size=1, max_size=4))
def test_every_shared_solution_passes_the_checker(shares, count, claims) -> None:
    inventory = _inventory(shares, count)
    for solution in all_solutions(inventory, "n", claims, Usage.of(inventory, []), CLASSES, limit=30):
        allocations = []
        for index, (claim, results) in enumerate(zip(claims, solution.results)):
            assert check_claim(inventory, claim, results, "n", CLASSES, f"c{index}") == []
            allocations.append((f"c{index}", list(results)))
        assert check_usage(inventory, allocations) == []
        assert shared_memory_violations(inventory, allocations) == []


# --- a shared partitionable GPU (dynamic MIG with consumable shares): counters consumed once ------------------

def _partitionable(shares: str = "memory") -> Inventory:
    """One GPU as NVIDIA publishes it with dynamic MIG and shares: the full device and a 1g MIG device, both
    shareable, consuming one counter set (8 memory slices: the full device all, the MIG device one)."""
    def device(name: str, slices: int, memory: str) -> dict:
        raw = apply_consumable_shares({"name": name, "attributes": {"type": {"string": "gpu" if slices == 8 else "mig"}},
                                       "capacity": {"memory": {"value": memory}}}, shares, frozenset())
        return {**raw, "consumesCounters": [{"counterSet": "gpu-0-counter-set", "counters": {"memory-slices": {"value": str(slices)}}}]}

    spec = {"driver": DRIVER, "nodeName": "n", "pool": {"name": "n", "generation": 1, "resourceSliceCount": 1},
            "sharedCounters": [{"name": "gpu-0-counter-set", "counters": {"memory-slices": {"value": "8"}}}],
            "devices": [device("gpu-0", 8, "81559Mi"), device("gpu-0-mig-1g10gb-19-0", 1, "9984Mi")]}
    return Inventory.from_slices([{"metadata": {"name": "n-slice"}, "spec": spec}])


def _named(device: str, *capacity: tuple[str, str]) -> ClaimSpec:
    device_class = ID.gpu_class if device == "gpu" else ID.mig_class
    return ClaimSpec((Request("r", (SubRequest("r", device_class, capacity=tuple(capacity)),)),))


def test_shares_of_a_partitionable_gpu_consume_its_counters_once_and_hold_them() -> None:
    inventory = _partitionable()
    full = DeviceId(DRIVER, "n", "gpu-0")
    two = _place(inventory, [_named("gpu", ("memory", "4Gi")), _named("gpu", ("memory", "4Gi"))])
    assert two is not None and [r[0].device for r in two.results] == [full, full]  # the second share needs no counters
    held = Usage.of(inventory, _held(two))
    assert dict(held.consumed[next(iter(held.consumed))]) == {"memory-slices": Decimal(8)}  # once, not twice
    assert _place(inventory, [_named("mig")], held) is None  # the shares hold the GPU's counters: no MIG device
    assert _place(inventory, [_named("mig")]) is not None  # released, it fits again
    assert _place(inventory, [_named("mig"), _named("mig")]) is None  # unasked, a share takes the device's memory
    mig = _place(inventory, [_named("mig", ("memory", "4Gi")), _named("mig", ("memory", "4Gi"))])
    assert mig is not None and len({r[0].device for r in mig.results}) == 1  # two shares of one MIG device
    assert _place(inventory, [_named("gpu", ("memory", "4Gi"))], Usage.of(inventory, _held(mig))) is None
