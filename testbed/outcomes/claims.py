"""Per ResourceClaim and DeviceClass of the input: what it got, or why not, and what a class selects.

Pods are not the only thing a user writes to ask for devices: a claim no pod uses is never allocated (the
scheduler allocates claims for the pods it places), and a claim whose requests the server dropped asks for
nothing. Both were invisible when only pods were reported.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import Mapping, Sequence

from testbed.outcomes.explain import Allocation, _request_problem, allocation, results
from testbed.workloads.observe import allocation_result
from testbed.outcomes.fleet import Fleet
from testbed.outcomes.settle import Snapshot
from testbed.workloads.oracle import ModelTooLarge, Usage, feasible_nodes


@dataclass
class ClaimOutcome:
    """One ResourceClaim of the input after scheduling settled."""

    namespace: str
    name: str
    verdict: str  # allocated | unallocated
    allocations: list[Allocation] = field(default_factory=list)
    pods: list[str] = field(default_factory=list)  # pods that use it
    reasons: list[str] = field(default_factory=list)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass
class ClassOutcome:
    """One DeviceClass of the input: how many published devices its selectors take, on which boards."""

    name: str
    devices: int
    boards: dict[str, int] = field(default_factory=dict)
    problem: str | None = None

    def as_dict(self) -> dict:
        return asdict(self)


def _users(snapshot: Snapshot, namespace: str, name: str) -> list[str]:
    return sorted(p["metadata"]["name"] for p in snapshot.pods.values() if p["metadata"]["namespace"] == namespace
                  and any(c.get("resourceClaimName") == name for c in (p.get("spec") or {}).get("resourceClaims") or []))


def explain_claim(namespace: str, name: str, snapshot: Snapshot, fleet: Fleet, all_claims: Sequence[Mapping]) -> ClaimOutcome:
    """Where a claim's devices are, or why it has none."""
    claim = snapshot.claims.get((namespace, name))
    users = _users(snapshot, namespace, name)
    if claim is None:
        return ClaimOutcome(namespace, name, "unallocated", pods=users, reasons=["deleted before scheduling settled"])
    got = [allocation(claim, r, fleet, all_claims) for r in results(claim)]
    if got:
        return ClaimOutcome(namespace, name, "allocated", got, users)
    outcome = ClaimOutcome(namespace, name, "unallocated", pods=users)
    if not ((claim.get("spec") or {}).get("devices") or {}).get("requests"):
        outcome.reasons.append("it asks for no devices (spec.devices.requests is empty; see the field warnings)")
        return outcome
    if users:
        outcome.reasons.append(f"its pods are not scheduled ({', '.join(users)}): see their reasons")
        return outcome
    outcome.reasons.append("no pod uses it: the scheduler allocates a claim only for a pod it places")
    others = [c for c in all_claims if (c["metadata"]["namespace"], c["metadata"]["name"]) != (namespace, name)]
    outcome.reasons.append(fits(claim, fleet, others))
    return outcome


def fits(claim: Mapping, fleet: Fleet, others: Sequence[Mapping]) -> str:
    """Whether a pod using the claim would get devices, and where, with the fleet as it is now."""
    spec = fleet.claim_spec(claim["spec"])
    for request in spec.requests:
        problems = [p for p in (_request_problem(fleet, a) for a in request.alternatives) if p]
        if len(problems) == len(request.alternatives):
            return f"a pod using it would stay pending: request {request.name}: {problems[0]}"
    usage = Usage.of(fleet.inventory, [(c["metadata"]["name"], [allocation_result(r) for r in results(c)]) for c in others])
    try:
        now = feasible_nodes(fleet.inventory, [spec], usage, fleet.classes())
    except ModelTooLarge:
        return "too large a case for the reference model to say where it would fit"
    if now:
        names = sorted(now)
        return "a pod using it would get devices on " + ", ".join(names[:4]) + (f" and {len(names) - 4} more" if len(names) > 4 else "")
    return "no node has devices for all its requests together now"


def explain_class(name: str, fleet: Fleet) -> ClassOutcome:
    """How many published devices a DeviceClass selects, per board, or why none."""
    selector = fleet.class_selector(name)
    if selector is None:
        return ClassOutcome(name, 0, problem="not served by the bed (refused or deleted)")
    errors = [s.compile_error for s in selector.parts if getattr(s, "compile_error", None)]
    members = [d for d in fleet.inventory.devices.values() if selector.matches(d)]
    boards = Counter(fleet.board_of(d) for d in members)
    outcome = ClassOutcome(name, len(members), dict(sorted(boards.items())))
    if errors:
        outcome.problem = f"CEL error: {errors[0]}"
    elif not members:
        drivers = sorted({d.id.driver for d in fleet.inventory.devices.values()})
        outcome.problem = f"its selectors match no published device (drivers publishing: {', '.join(drivers) or 'none'})"
    return outcome
