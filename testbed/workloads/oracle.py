"""Reference model of structured-parameters allocation over the cluster's ResourceSlices.

It answers: can these claims be allocated together on this node, given what is already allocated
(devices in use, shared counters consumed)? Which `firstAvailable` alternative wins there? Does an
observed allocation satisfy its claim? The search follows the facts of the scheduler's allocator
(k8s.io/dynamic-resource-allocation structured, 1.34): claims in pod order, requests in order,
alternatives in order, first full solution wins; `All` takes every matching device of the node or
fails; a `matchAttribute` constraint needs the attribute on every device it covers; adminAccess
devices may be in use elsewhere but never twice in one claim, and do not count as in use afterwards;
devices that consume counters need every consumed counter available. With consumable capacity
(DRAConsumableCapacity, testbed.workloads.capacity) a device that allows multiple allocations is never in
use: each allocation takes a share of its capacity, rounded per its request policies, while the shares
held together fit; on every device a request's capacity must be published and fit.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Callable, Iterable, Iterator, Mapping, Sequence

from kubernetes.utils.quantity import parse_quantity

from fake_gpus.driver.identity import DriverIdentity
from testbed.workloads.capacity import consumption, fits
from testbed.workloads.devices import AttributeValue, CounterSetId, Device, DeviceId, Inventory, Version
from testbed.workloads.model import ClaimSpec, MatchAttribute, Request, SubRequest
from testbed.workloads.selectors import AllOf, DriverIs, Selector, StringIs

MAX_RESULTS = 32  # devices per claim allocation (resource.k8s.io/v1 AllocationResultsMaxSize)
SEARCH_BUDGET = 200_000  # device placements tried before the model gives up on a case


class ModelTooLarge(RuntimeError):
    """The exhaustive search exceeded its budget: the case is not small, the model has no answer."""


class _Abort(Exception):
    """The scheduler would stop with an error on this node (e.g. an `All` request a constraint rejects)."""


def class_selectors(identity: DriverIdentity) -> dict[str, Selector]:
    """The DeviceClasses the driver installs, as structured selectors (see `check_classes`)."""
    return {
        identity.gpu_class: AllOf((DriverIs(identity.driver), StringIs("type", "gpu"))),
        identity.mig_class: AllOf((DriverIs(identity.driver), StringIs("type", "mig"))),
    }


def check_classes(identity: DriverIdentity, served: Mapping[str, list[str]]) -> None:
    """Refuse to model classes whose CEL differs from what `class_selectors` assumes."""
    for wanted in identity.device_classes():
        name = wanted["metadata"]["name"]
        expected = [s["cel"]["expression"] for s in wanted["spec"]["selectors"]]
        if served.get(name) != expected:
            raise AssertionError(f"DeviceClass {name} serves {served.get(name)!r}, the model assumes {expected!r}")


@dataclass(frozen=True)
class Result:
    """One device of an allocation result; `request` is `req` or `req/sub`. A share of a device that allows
    multiple allocations has a `share_id` and what it `consumed` of each capacity (fully qualified names)."""

    request: str
    device: DeviceId
    admin: bool = False
    share_id: str | None = None
    consumed: tuple[tuple[str, Decimal], ...] = ()


@dataclass
class Usage:
    """What live allocations hold: devices in use (admin access excluded), counters consumed, and the capacity
    that shares of multiply allocatable devices hold."""

    in_use: dict[DeviceId, str] = field(default_factory=dict)  # device -> claim holding it
    consumed: dict[CounterSetId, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(Decimal)))
    shared: dict[DeviceId, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(Decimal)))
    shared_devices: set[DeviceId] = field(default_factory=set)  # devices with at least one share allocated

    @classmethod
    def of(cls, inventory: Inventory, allocations: Iterable[tuple[str, Sequence[Result]]]) -> Usage:
        usage = cls()
        for owner, results in allocations:
            for result in results:
                if result.admin:
                    continue  # the scheduler does not count admin-access results as allocated
                device = inventory.devices.get(result.device)
                if result.share_id is not None:
                    # a share: the device stays free for other shares; its counters are consumed once, by its
                    # first share, and held while any share is allocated (1.36's allocator; see upstream.py
                    # SHARED_COUNTERS_HELD_FIXED for the minors that forget them)
                    for name, amount in result.consumed:
                        usage.shared[result.device][name] += amount
                    if result.device in usage.shared_devices:
                        continue
                    usage.shared_devices.add(result.device)
                else:
                    usage.in_use[result.device] = owner
                for counter_set, counters in device.consumes if device else ():
                    for name, amount in counters:
                        usage.consumed[counter_set][name] += amount
        return usage


@dataclass(frozen=True)
class Solution:
    """Devices for each claim, and the alternative chosen for each request of each claim."""

    results: tuple[tuple[Result, ...], ...]
    choices: tuple[tuple[int, ...], ...]


@dataclass
class _State:
    usage: Usage
    inventory: Inventory
    tentative: dict[DeviceId, set[int]] = field(default_factory=lambda: defaultdict(set))
    # capacity taken by shares tentatively allocated in this search, per device
    sharing: dict[DeviceId, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(Decimal)))
    shares: dict[DeviceId, int] = field(default_factory=lambda: defaultdict(int))  # shares tentatively allocated, per device
    counters: dict[CounterSetId, dict[str, Decimal]] = field(default_factory=lambda: defaultdict(lambda: defaultdict(Decimal)))
    # per claim, per constraint: [value, number of devices]
    constraint_state: list[list[list]] = field(default_factory=list)
    budget: int = SEARCH_BUDGET


def _applies(constraint: MatchAttribute, request: Request, alternative: SubRequest) -> bool:
    if not constraint.requests:
        return True
    return request.name in constraint.requests or f"{request.name}/{alternative.name}" in constraint.requests


def _same(a: AttributeValue, b: AttributeValue) -> bool:
    return type(a) is type(b) and a == b


class _Search:
    """Depth-first search in the allocator's order; yields every solution, first one first."""

    def __init__(self, inventory: Inventory, node: str, claims: Sequence[ClaimSpec], usage: Usage,
                 classes: Mapping[str, Selector]) -> None:
        self.claims = claims
        self.devices = inventory.on_node(node)
        self.classes = classes
        self.state = _State(usage, inventory, constraint_state=[[[None, 0] for _ in c.constraints] for c in claims])
        self.picked: list[list[Result]] = [[] for _ in claims]
        self.choices: list[list[int]] = [[] for _ in claims]

    def candidates(self, alternative: SubRequest) -> list[Device]:
        device_class = self.classes.get(alternative.device_class)
        if device_class is None:
            return []  # an unknown class: the scheduler cannot allocate it anywhere
        return [d for d in self.devices if device_class.matches(d) and all(s.matches(d) for s in alternative.selectors)]

    def _asked(self, device: Device, alternative: SubRequest) -> dict[str, Decimal]:
        return {(name if "/" in name else f"{device.driver}/{name}"): Decimal(parse_quantity(amount))
                for name, amount in alternative.capacity}

    def _consumption(self, device: Device, alternative: SubRequest) -> dict[str, Decimal] | None:
        """What taking `device` for `alternative` consumes of its capacity, or None when it does not fit there."""
        consumed = consumption(self._asked(device, alternative), device.capacity, device.policies)
        if consumed is None:
            return None
        held = self.state.sharing.get(device.id, {})
        if device.allow_multiple:
            before = self.state.usage.shared.get(device.id, {})
            held = {name: before.get(name, Decimal(0)) + held.get(name, Decimal(0)) for name in device.capacity}
        return consumed if fits(consumed, held, device.capacity) else None

    # --- one device -------------------------------------------------------------------------------

    def _free(self, device: Device, claim: int, admin: bool) -> bool:
        if admin and device.allow_multiple:
            return True  # the allocator keeps no claim from a second share of a shared device
        if admin:
            return claim not in self.state.tentative.get(device.id, ())
        return device.id not in self.state.usage.in_use and not self.state.tentative.get(device.id)

    def _shared_already(self, device: Device) -> bool:
        """Whether a share of `device` is allocated or tentatively taken: its counters are consumed already."""
        return device.allow_multiple and (device.id in self.state.usage.shared_devices or self.state.shares[device.id] > 0)

    def _counters_fit(self, device: Device) -> bool:
        state = self.state
        if self._shared_already(device):
            return True  # the allocator skips the counter check of a device whose capacity is in use
        for counter_set, counters in device.consumes:
            capacity = state.inventory.counters.get(counter_set)
            if capacity is None:
                continue  # the scheduler skips counter sets it cannot find
            for name, amount in counters:
                if name not in capacity:
                    continue
                used = state.usage.consumed.get(counter_set, {}).get(name, Decimal(0)) + state.counters[counter_set][name]
                if used + amount > capacity[name]:
                    return False
        return True

    def _constraints_ok(self, device: Device, claim: int, request: Request, alternative: SubRequest) -> bool:
        for constraint, (value, _count) in zip(self.claims[claim].constraints, self.state.constraint_state[claim]):
            if not _applies(constraint, request, alternative):
                continue
            attribute = device.attribute(constraint.attribute)
            if attribute is None or (value is not None and not _same(value, attribute)):
                return False
        return True

    def _take(self, device: Device, claim: int, request: Request, index: int, consumed: Mapping[str, Decimal]) -> None:
        alternative = request.alternatives[index]
        self.state.budget -= 1
        if self.state.budget < 0:
            raise ModelTooLarge("search budget exhausted")
        share_id, share = None, ()
        first = not self._shared_already(device)  # a share after the first consumes no counters
        if device.allow_multiple:
            for name, amount in consumed.items():
                self.state.sharing[device.id][name] += amount
            self.state.shares[device.id] += 1
            share_id, share = "model", tuple(sorted(consumed.items()))
        else:
            self.state.tentative[device.id].add(claim)
        for counter_set, counters in device.consumes if first else ():
            for name, amount in counters:
                self.state.counters[counter_set][name] += amount
        for constraint, slot in zip(self.claims[claim].constraints, self.state.constraint_state[claim]):
            if _applies(constraint, request, alternative):
                slot[0] = device.attribute(constraint.attribute) if slot[1] == 0 else slot[0]
                slot[1] += 1
        self.picked[claim].append(Result(request.result_name(index), device.id, alternative.admin_access, share_id, share))

    def _give_back(self, device: Device, claim: int, request: Request, index: int) -> None:
        alternative = request.alternatives[index]
        for name, amount in self.picked[claim][-1].consumed:
            self.state.sharing[device.id][name] -= amount
        if device.allow_multiple:
            self.state.shares[device.id] -= 1
        self.state.tentative[device.id].discard(claim)
        for counter_set, counters in () if self._shared_already(device) else device.consumes:
            for name, amount in counters:
                self.state.counters[counter_set][name] -= amount
        for constraint, slot in zip(self.claims[claim].constraints, self.state.constraint_state[claim]):
            if _applies(constraint, request, alternative):
                slot[1] -= 1
                if slot[1] == 0:
                    slot[0] = None
        self.picked[claim].pop()

    # --- the walk ---------------------------------------------------------------------------------

    def solutions(self) -> Iterator[Solution]:
        yield from self._claim(0)

    def _claim(self, claim: int) -> Iterator[Solution]:
        if claim == len(self.claims):
            yield Solution(tuple(tuple(p) for p in self.picked), tuple(tuple(c) for c in self.choices))
            return
        yield from self._request(claim, 0)

    def _request(self, claim: int, index: int) -> Iterator[Solution]:
        requests = self.claims[claim].requests
        if index == len(requests):
            yield from self._claim(claim + 1)
            return
        request = requests[index]
        for alt_index, alternative in enumerate(request.alternatives):
            self.choices[claim].append(alt_index)
            yield from self._alternative(claim, index, request, alt_index, alternative)
            self.choices[claim].pop()

    def _alternative(self, claim: int, index: int, request: Request, alt_index: int, alternative: SubRequest) -> Iterator[Solution]:
        candidates = self.candidates(alternative)
        if alternative.all_devices:
            if not candidates or len(self.picked[claim]) + len(candidates) > MAX_RESULTS:
                return
            taken: list[Device] = []
            try:
                for device in candidates:
                    consumed = self._consumption(device, alternative)
                    if not (self._free(device, claim, alternative.admin_access) and self._counters_fit(device)) or consumed is None:
                        return
                    if not self._constraints_ok(device, claim, request, alternative):
                        raise _Abort(f"request {request.name}: a constraint rejects one of all its devices")
                    self._take(device, claim, request, alt_index, consumed)
                    taken.append(device)
                yield from self._request(claim, index + 1)
            finally:
                for device in reversed(taken):
                    self._give_back(device, claim, request, alt_index)
            return
        if len(self.picked[claim]) + alternative.count > MAX_RESULTS:
            return
        yield from self._pick(claim, index, request, alt_index, candidates, 0, alternative.count)

    def _pick(self, claim: int, index: int, request: Request, alt_index: int, candidates: list[Device],
              start: int, remaining: int) -> Iterator[Solution]:
        if remaining == 0:
            yield from self._request(claim, index + 1)
            return
        alternative = request.alternatives[alt_index]
        # a shared device may serve several devices of one request (the allocator never marks it in use), so then
        # the walk is over multisets: the next pick may start at the same device
        shared = any(d.allow_multiple for d in candidates[start:])
        for position in range(start, len(candidates) if shared else len(candidates) - remaining + 1):
            device = candidates[position]
            if not (self._free(device, claim, alternative.admin_access) and self._counters_fit(device)):
                continue
            consumed = self._consumption(device, alternative)
            if consumed is None or not self._constraints_ok(device, claim, request, alternative):
                continue
            self._take(device, claim, request, alt_index, consumed)
            try:
                following = position if device.allow_multiple else position + 1
                yield from self._pick(claim, index, request, alt_index, candidates, following, remaining - 1)
            finally:
                self._give_back(device, claim, request, alt_index)


def first_solution(inventory: Inventory, node: str, claims: Sequence[ClaimSpec], usage: Usage,
                   classes: Mapping[str, Selector]) -> Solution | None:
    """The allocation the scheduler's search would find first on `node`, or None when there is none.

    Raises ModelTooLarge when the case is too big to decide exhaustively.
    """
    try:
        return next(_Search(inventory, node, claims, usage, classes).solutions(), None)
    except _Abort:
        return None


def all_solutions(inventory: Inventory, node: str, claims: Sequence[ClaimSpec], usage: Usage,
                  classes: Mapping[str, Selector], limit: int = 10_000) -> list[Solution]:
    """Every valid allocation on `node` (up to `limit`), in the scheduler's search order."""
    found: list[Solution] = []
    try:
        for solution in _Search(inventory, node, claims, usage, classes).solutions():
            found.append(solution)
            if len(found) >= limit:
                break
    except _Abort:
        pass
    return found


def feasible_nodes(inventory: Inventory, claims: Sequence[ClaimSpec], usage: Usage, classes: Mapping[str, Selector],
                   nodes: Iterable[str] | None = None) -> dict[str, Solution]:
    """Nodes where the claims fit together, with the first solution on each."""
    found = {}
    for node in nodes if nodes is not None else inventory.nodes():
        solution = first_solution(inventory, node, claims, usage, classes)
        if solution is not None:
            found[node] = solution
    return found


# --- checking observed allocations -------------------------------------------------------------------


@dataclass
class Violation:
    """A broken promise: which property, what the model expected, what the cluster did."""

    property: str
    message: str
    expected: object = None
    observed: object = None
    double: bool = False  # one device, counter or placement held twice: said where it is found, not read from the message

    def as_dict(self) -> dict:
        return {"property": self.property, "message": self.message, "expected": _jsonable(self.expected),
                "observed": _jsonable(self.observed)}


def _jsonable(value: object) -> object:
    if isinstance(value, (str, int, float, bool)) or value is None:
        return value
    if isinstance(value, (Decimal, Version, DeviceId, CounterSetId)):
        return str(value)
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_jsonable(v) for v in value]
    if hasattr(value, "__dataclass_fields__"):
        return {k: _jsonable(getattr(value, k)) for k in value.__dataclass_fields__}
    return repr(value)


def check_claim(inventory: Inventory, claim: ClaimSpec, results: Sequence[Result], node: str,
                classes: Mapping[str, Selector], owner: str, truth: Callable[[Device], Device] | None = None) -> list[Violation]:
    """Does an observed allocation satisfy its claim: selectors, counts, All, constraints, admin flag, node?

    `truth` maps a published device to its real facts: selectors must hold on those too.
    """
    problems: list[Violation] = []
    by_request: dict[str, list[Result]] = defaultdict(list)
    for result in results:
        by_request[result.request.split("/", 1)[0]].append(result)
    seen: set[DeviceId] = set()
    for result in results:
        device = inventory.devices.get(result.device)
        if device is None:
            problems.append(Violation("soundness", f"{owner}: allocated device {result.device} is not published", None, str(result.device)))
        elif device.node != node:
            problems.append(Violation("soundness", f"{owner}: device {result.device} belongs to node {device.node}, the pod runs on {node}",
                                      node, device.node))
        if result.device in seen and result.share_id is None:
            problems.append(Violation("soundness", f"{owner}: device {result.device} allocated twice in one claim", None, str(result.device)))
        seen.add(result.device)
    unknown = set(by_request) - {r.name for r in claim.requests}
    if unknown:
        problems.append(Violation("soundness", f"{owner}: results for requests the claim does not have: {sorted(unknown)}"))
    chosen: dict[str, SubRequest] = {}
    for request in claim.requests:
        got = by_request.get(request.name, [])
        names = {r.request for r in got}
        valid = {request.result_name(i): i for i in range(len(request.alternatives))}
        if len(names) != 1 or not names <= set(valid):
            problems.append(Violation("soundness", f"{owner}: request {request.name} must be served by exactly one alternative",
                                      sorted(valid), sorted(names)))
            continue
        alternative = request.alternatives[valid[names.pop()]]
        chosen[request.name] = alternative
        devices = [inventory.devices[r.device] for r in got if r.device in inventory.devices]
        device_class = classes.get(alternative.device_class)
        for device in devices:
            if device_class is None or not device_class.matches(device):
                problems.append(Violation("soundness", f"{owner}: {device.id} is not of class {alternative.device_class}"))
            for facts in (device, truth(device)) if truth else (device,):
                for selector in alternative.selectors:
                    if not selector.matches(facts):
                        real = " (on the board's real facts)" if facts is not device else ""
                        problems.append(Violation("soundness", f"{owner}: {device.id} fails selector {selector.cel(device.driver)}{real}",
                                                  selector.describe(), _device_facts(facts)))
        for result in got:
            if result.admin != alternative.admin_access:
                problems.append(Violation("soundness", f"{owner}: {result.device} adminAccess {result.admin}, request asked {alternative.admin_access}"))
            device = inventory.devices.get(result.device)
            if device is not None:
                problems += share_violations(device, alternative, result, owner)
        if alternative.all_devices:
            wanted = {d.id for d in inventory.on_node(node)
                      if device_class is not None and device_class.matches(d) and all(s.matches(d) for s in alternative.selectors)}
            if {r.device for r in got} != wanted:
                problems.append(Violation("soundness", f"{owner}: request {request.name} (All) got a different device set",
                                          sorted(map(str, wanted)), sorted(str(r.device) for r in got)))
        elif len(got) != alternative.count:
            problems.append(Violation("soundness", f"{owner}: request {request.name} wanted {alternative.count} devices",
                                      alternative.count, len(got)))
    for constraint in claim.constraints:
        values = []
        for result in results:
            request = next((r for r in claim.requests if r.name == result.request.split("/", 1)[0]), None)
            alternative = chosen.get(request.name) if request else None
            if alternative is None or not _applies(constraint, request, alternative):
                continue
            device = inventory.devices.get(result.device)
            values.append(device.attribute(constraint.attribute) if device else None)
        if values and (any(v is None for v in values) or any(not _same(values[0], v) for v in values)):
            problems.append(Violation("soundness", f"{owner}: matchAttribute {constraint.attribute} violated",
                                      "one value", [str(v) for v in values]))
    return problems


def share_violations(device: Device, alternative: SubRequest, result: Result, owner: str) -> list[Violation]:
    """One result against consumable capacity: the request's capacity is published and fits the device, a shared
    device's result is a share (and only such a device's), and it consumed what the allocator's rounding gives."""
    asked = {(n if "/" in n else f"{device.driver}/{n}"): Decimal(parse_quantity(a)) for n, a in alternative.capacity}
    expected = consumption(asked, device.capacity, device.policies)
    if expected is None or not fits(expected, {}, device.capacity):
        return [Violation("soundness", f"{owner}: {device.id} cannot serve capacity {dict(alternative.capacity)} under its policies",
                          None, _device_facts(device))]
    if device.allow_multiple != (result.share_id is not None):
        return [Violation("soundness", f"{owner}: {device.id} allows multiple allocations: {device.allow_multiple}, "
                          f"its result has a shareID: {result.share_id is not None}")]
    if device.allow_multiple and dict(result.consumed) != expected:
        return [Violation("soundness", f"{owner}: {device.id} consumed capacity differs from the request rounded per the device's policies",
                          expected, dict(result.consumed))]
    return []


def check_usage(inventory: Inventory, allocations: Sequence[tuple[str, Sequence[Result]]]) -> list[Violation]:
    """No device held by two claims (admin access and shares aside), nor held whole and shared at once; no device
    holding more capacity in shares than it has; no shared counter over-committed."""
    problems: list[Violation] = []
    holders: dict[DeviceId, list[str]] = defaultdict(list)
    for owner, results in allocations:
        for result in results:
            if not result.admin and result.share_id is None:
                holders[result.device].append(owner)
    for device, owners in holders.items():
        if len(owners) > 1:
            problems.append(Violation("soundness", f"device {device} is allocated to {len(owners)} claims", 1, owners, double=True))
    usage = Usage.of(inventory, allocations)
    for device_id, held in usage.shared.items():
        if device_id in holders:
            problems.append(Violation("soundness", f"device {device_id} is allocated whole and in shares at once", None,
                                      holders[device_id], double=True))
        capacity = inventory.devices[device_id].capacity if device_id in inventory.devices else {}
        for name, amount in held.items():
            if name in capacity and amount > capacity[name]:
                problems.append(Violation("soundness", f"device {device_id} holds {amount} of {name} in shares, more than its {capacity[name]}",
                                          str(capacity[name]), str(amount), double=True))
    for counter_set, consumed in usage.consumed.items():
        capacity = inventory.counters.get(counter_set, {})
        for name, amount in consumed.items():
            if name in capacity and amount > capacity[name]:
                problems.append(Violation("soundness", f"counter {counter_set}/{name} over-committed", str(capacity[name]), str(amount), double=True))
    return problems


def _device_facts(device: Device) -> dict:
    return {"id": str(device.id), "attributes": {k: str(v) for k, v in device.attributes.items()},
            "capacity": {k: str(v) for k, v in device.capacity.items()}}
