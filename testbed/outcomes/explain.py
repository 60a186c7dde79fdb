"""Per pod: where it landed (node, board, devices, MIG profiles), or why it is pending.

The reason for a pending pod is first the scheduler's own (its newest FailedScheduling message), then
ours, computed over the published devices: which request no device on any node satisfies and what the
nearest candidates offer, or that the devices exist but other claims hold them, or that they are free and
something other than devices blocks the pod. Our part uses the oracle (testbed/workloads/oracle.py) with
the user's CEL evaluated by the scheduler's compiler.
"""

from __future__ import annotations

import re
from collections import Counter, defaultdict
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from typing import Mapping, Sequence

from testbed.outcomes.fleet import CelSelector, Fleet
from testbed.outcomes.settle import Snapshot, claim_names
from testbed.outcomes.shares import share_of, share_text
from testbed.workloads.devices import Device, DeviceId, Version
from testbed.workloads.model import ClaimSpec, SubRequest
from testbed.workloads.observe import allocation_result
from testbed.workloads.oracle import ModelTooLarge, Usage, feasible_nodes

MAY_PEND = "dra-testbed.io/may-pend"  # annotation: "true" when the pod is expected to stay pending
_REFERENCE = re.compile(r"""device\.(attributes|capacity)\[\s*['"]([^'"]+)['"]\s*\]\.(\w+)""")
_STANDARD_RESOURCES = ("cpu", "memory", "ephemeral-storage", "pods")


@dataclass
class Allocation:
    """One allocated device."""

    claim: str
    request: str
    device: str
    node: str
    board: str
    product: str | None = None
    profile: str | None = None
    memory: str | None = None
    share: str | None = None  # a share of a shared device: what it took, who else holds it, what is left


@dataclass
class PodOutcome:
    """Where one pod landed, or why it did not."""

    namespace: str
    name: str
    owner: str  # Kind/name of the workload that made it, or "" for a bare pod
    verdict: str  # scheduled | pending | gated | unsettled
    may_pend: bool = False
    node: str | None = None
    board: str | None = None
    allocations: list[Allocation] = field(default_factory=list)
    legacy: dict[str, str] = field(default_factory=dict)  # extended resources asked for, device-plugin style
    scheduler: str | None = None  # the scheduler's own message
    reasons: list[str] = field(default_factory=list)  # ours

    @property
    def ok(self) -> bool:
        return self.verdict == "scheduled" or self.may_pend

    @property
    def key(self) -> str:
        return f"{self.namespace}/{self.owner or self.name}"

    def as_dict(self) -> dict:
        return dict(asdict(self), ok=self.ok)


def owner_of(pod: Mapping) -> str:
    """The workload a pod belongs to: Deployment (through its ReplicaSet), Job, StatefulSet, ... or ""."""
    refs = pod["metadata"].get("ownerReferences") or []
    if not refs:
        return ""
    ref = refs[0]
    if ref["kind"] == "ReplicaSet" and "pod-template-hash" in (pod["metadata"].get("labels") or {}):
        suffix = "-" + pod["metadata"]["labels"]["pod-template-hash"]
        return f"Deployment/{ref['name'].removesuffix(suffix)}"
    return f"{ref['kind']}/{ref['name']}"


def legacy_requests(pod: Mapping) -> dict[str, str]:
    """Extended resources (e.g. nvidia.com/gpu) the pod's containers ask for."""
    found: dict[str, str] = {}
    for container in [*(pod["spec"].get("initContainers") or []), *(pod["spec"].get("containers") or [])]:
        resources = container.get("resources") or {}
        for key, value in {**(resources.get("limits") or {}), **(resources.get("requests") or {})}.items():
            if "/" in key and not key.startswith("hugepages-") and key not in _STANDARD_RESOURCES:
                found[key] = str(value)
    return found


def results(claim: Mapping) -> list[dict]:
    allocation = (claim.get("status") or {}).get("allocation") or {}
    return (allocation.get("devices") or {}).get("results") or []


def _gib(value: Decimal) -> str:
    text = f"{value / Decimal(2**30):.1f}".removesuffix(".0")
    return f"{text}Gi"


def explain(snapshot: Snapshot, fleet: Fleet, all_claims: Sequence[Mapping]) -> list[PodOutcome]:
    """Outcomes of every pod in the snapshot, sorted by namespace, workload and name."""
    outcomes = [_outcome(pod, snapshot, fleet, all_claims) for pod in snapshot.pods.values()]
    return sorted(outcomes, key=lambda o: (o.namespace, o.owner, o.name))


def _outcome(pod: Mapping, snapshot: Snapshot, fleet: Fleet, all_claims: Sequence[Mapping]) -> PodOutcome:
    meta = pod["metadata"]
    verdict = {"bound": "scheduled", "unschedulable": "pending", "gated": "gated", None: "unsettled"}[snapshot.verdict(pod)]
    outcome = PodOutcome(meta["namespace"], meta["name"], owner_of(pod), verdict,
                         may_pend=(meta.get("annotations") or {}).get(MAY_PEND) == "true",
                         legacy=legacy_requests(pod))
    claims = [snapshot.claims[(meta["namespace"], n)] for n in claim_names(pod) if (meta["namespace"], n) in snapshot.claims]
    if verdict == "scheduled":
        keys = [(meta["namespace"], n) for n in claim_names(pod)]
        claims = [snapshot.allocated[k] if k in snapshot.allocated else snapshot.claims[k] for k in keys
                  if k in snapshot.allocated or k in snapshot.claims]
        outcome.node = pod["spec"]["nodeName"]
        outcome.board = fleet.boards.get(outcome.node)
        outcome.allocations = [allocation(claim, result, fleet, all_claims) for claim in claims for result in results(claim)]
        return outcome
    failure = snapshot.latest_failure(pod)
    outcome.scheduler = " ".join(failure["message"].split()) if failure else None
    if verdict == "gated":
        gates = ", ".join(g["name"] for g in pod["spec"].get("schedulingGates") or [])
        outcome.reasons.append(f"scheduling gates not removed: {gates}")
        return outcome
    own = {(c["metadata"]["namespace"], c["metadata"]["name"]) for c in claims}
    outcome.reasons = diagnose(fleet, claims, outcome.legacy, [c for c in all_claims
                                                                if (c["metadata"]["namespace"], c["metadata"]["name"]) not in own])
    return outcome


def allocation(claim: Mapping, result: Mapping, fleet: Fleet, all_claims: Sequence[Mapping] = ()) -> Allocation:
    """One allocated device; `all_claims` (the cluster's) tell a share who else holds its device."""
    device = fleet.inventory.devices.get(DeviceId(result["driver"], result["pool"], result["device"]))
    node = device.node if device and device.node else result["pool"]
    memory = device.capacity_of("memory") if device else None
    share = share_of(result, device, all_claims or [claim])
    return Allocation(claim["metadata"]["name"], result["request"], result["device"], node, fleet.boards.get(node, "?"),
                      _string(device, "productName"), _string(device, "profile"), _gib(memory) if memory is not None else None,
                      share_text(share) if share else None)


def _string(device: Device | None, name: str) -> str | None:
    value = device.attribute(name) if device else None
    return str(value) if value is not None else None


# --- why pending -------------------------------------------------------------------------------------


def diagnose(fleet: Fleet, claims: Sequence[Mapping], legacy: Mapping[str, str], others: Sequence[Mapping]) -> list[str]:
    """Our reasons a pod with these claims (and extended resources) cannot be placed on the fleet now."""
    reasons: list[str] = []
    specs: list[ClaimSpec] = []
    for claim in claims:
        spec = fleet.claim_spec(claim["spec"])
        specs.append(spec)
        for request in spec.requests:
            # a firstAvailable request is served when any alternative can be: report them only if none can
            problems = [(a.name, _request_problem(fleet, a)) for a in request.alternatives]
            if all(problem for _, problem in problems):
                for name, problem in problems:
                    label = request.name if not request.first_available else f"{request.name}/{name}"
                    reasons.append(f"claim {claim['metadata']['name']} request {label}: {problem}")
    reasons += _legacy_problems(fleet, legacy)
    if reasons or not specs:
        return reasons or ["no device request of ours explains it; see the scheduler's reason"]
    classes = fleet.classes()
    # shares carry what they consumed, so a shared GPU with room left is not counted as held
    usage = Usage.of(fleet.inventory, [(c["metadata"]["name"], [allocation_result(r) for r in results(c)]) for c in others])
    try:
        empty = feasible_nodes(fleet.inventory, specs, Usage(), classes)
        now = feasible_nodes(fleet.inventory, specs, usage, classes)
    except ModelTooLarge:
        return ["too large a case for the reference model to say more"]
    if now:
        return [f"its devices are free on {_nodes(now)}: what blocks it is not the devices (see the scheduler's reason)"]
    if empty:
        holders = sorted({usage.in_use[d.id] for n in empty for d in fleet.inventory.on_node(n) if d.id in usage.in_use})
        return [f"fits on {_nodes(empty)} once devices are free; held now by claims {', '.join(holders[:6])}"
                + (f" and {len(holders) - 6} more" if len(holders) > 6 else "")]
    constraints = sorted({c.attribute for s in specs for c in s.constraints})
    together = f" with matchAttribute {', '.join(constraints)}" if constraints else ""
    return [f"every request matches devices, but no node has them all together{together}"]


def _nodes(found: Mapping[str, object]) -> str:
    names = sorted(found)
    return ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")


def _request_problem(fleet: Fleet, alternative: SubRequest) -> str | None:
    """Why no node can serve this (sub)request alone, on an empty fleet; None when some node can."""
    device_class = fleet.class_selector(alternative.device_class)
    if device_class is None:
        return f"DeviceClass {alternative.device_class!r} does not exist; served: {', '.join(sorted(fleet.device_classes)) or 'none'}"
    members = [d for d in fleet.inventory.devices.values() if device_class.matches(d)]
    if not members:
        return f"no device of class {alternative.device_class} on any node"
    for selector in alternative.selectors:
        assert isinstance(selector, CelSelector)
        failed = [d for d in members if d.id in selector.errors]
        if failed:
            return (f"CEL error on {len(failed)} of {len(members)} {alternative.device_class} devices "
                    f"(the scheduler rejects their nodes): {selector.errors[failed[0].id]}; expression: {selector.expression}")
    matching = [d for d in members if all(s.matches(d) for s in alternative.selectors)]
    if not matching:
        blocking = [s for s in alternative.selectors if not any(s.matches(d) for d in members)]
        if not blocking:
            return "its selectors together match no device, though each alone matches some"
        selector = blocking[0]
        assert isinstance(selector, CelSelector)
        return (f'"{selector.expression}" matches no {alternative.device_class} device '
                f"({_count(members)}); {nearest(selector.expression, members, fleet)}")
    if alternative.all_devices:
        return None
    per_node = Counter(d.node for d in matching)
    node, most = per_node.most_common(1)[0]
    if most < alternative.count:
        return (f"needs {alternative.count} matching devices on one node; at most {most} on any node "
                f"({node}, {fleet.boards.get(node or '', '?')})")
    return None


def _count(devices: Sequence[Device]) -> str:
    return f"{len(devices)} on {len({d.node for d in devices})} nodes"


def nearest(expression: str, members: Sequence[Device], fleet: Fleet) -> str:
    """What the fleet offers for the attributes and capacities the expression looks at."""
    parts = []
    for kind, domain, name in dict.fromkeys(_REFERENCE.findall(expression)):
        qualified = f"{domain}/{name}"
        values: dict[object, set[str]] = defaultdict(set)
        for device in members:
            value = (device.capacity if kind == "capacity" else device.attributes).get(qualified)
            if value is not None:
                values[value].add(fleet.board_of(device))
        if not values:
            parts.append(f"no such device has {kind[:-1] if kind == 'attributes' else kind} {name}")
            continue
        ordered = sorted(values, key=_sort_key, reverse=True)
        if kind == "capacity" or isinstance(ordered[0], (int, Version)) and not isinstance(ordered[0], bool):
            # the best each board offers, best board first (a partitionable H100 offers less than a whole one)
            best: dict[str, object] = {}
            for value in ordered:
                for board in values[value]:
                    best.setdefault(board, value)
            boards = sorted(best, key=lambda b: (_sort_key(best[b]), b), reverse=True)
            shown = [f"{_show(best[b])} on {b}" for b in boards[:4]]
            parts.append(f"largest {name} is {shown[0]}" + (f" (then {', '.join(shown[1:])})" if shown[1:] else ""))
        else:
            offered = [f"{_show(v)} on {', '.join(sorted(values[v]))}" for v in ordered[:4]]
            parts.append(f"{name} offered: {'; '.join(offered)}")
    return "; ".join(parts) or f"candidates: {', '.join(sorted({fleet.board_of(d) for d in members}))}"


def _sort_key(value: object) -> tuple:
    if isinstance(value, (Decimal, int, Version)) and not isinstance(value, bool):
        return (1, value if not isinstance(value, Version) else (value.major, value.minor, value.patch), "")
    return (0, 0, str(value))


def _show(value: object) -> str:
    if isinstance(value, Decimal):
        return _gib(value) if value >= 2**20 else str(value)
    return repr(value) if isinstance(value, str) else str(value)


def _legacy_problems(fleet: Fleet, legacy: Mapping[str, str]) -> list[str]:
    """Extended resources no DeviceClass maps, or maps to too few devices on any node."""
    problems = []
    for resource, amount in legacy.items():
        mapped = [n for n, c in fleet.device_classes.items()
                  if c["spec"].get("extendedResourceName") == resource or resource == f"deviceclass.resource.kubernetes.io/{n}"]
        if not mapped:
            problems.append(f"{resource}: no node advertises it and no DeviceClass maps it (spec.extendedResourceName)")
            continue
        selector = fleet.class_selector(mapped[0])
        per_node = Counter(d.node for d in fleet.inventory.devices.values() if selector and selector.matches(d))
        most = max(per_node.values(), default=0)
        if amount.isdigit() and most < int(amount):
            problems.append(f"{resource}: {amount} asked, DeviceClass {mapped[0]} has at most {most} devices on one node")
    return problems
