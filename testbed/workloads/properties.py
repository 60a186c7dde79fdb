"""The workload properties as pure checks over observed state: no API call, no waiting, no clock.

Each check takes what the runner observed (a `World`: slices, claims and the namespace's pods at one
moment; for fallback the moments before and after a step) and what the model says, and returns the
violations. The runner observes and waits; these only judge, so they can also serve as invariants of
a state machine and be tested on hand-made states.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from testbed.workloads.devices import Device
from testbed.workloads.model import ClaimSpec, PodSpec, SharedClaim
from testbed.workloads.observe import ObservedClaim, Snapshot
from testbed.workloads.oracle import Solution, Usage, Violation, check_claim, check_usage
from testbed.workloads.selectors import Selector
from testbed.workloads.truth import physical_violations, shared_memory_violations


@dataclass(frozen=True)
class PodView:
    """One pod as observed: where it is bound, its ResourceClaims, and why it is not scheduled."""

    name: str
    node: str | None  # spec.nodeName
    claims: Mapping[str, str]  # pod claim name -> ResourceClaim name, for the claims that exist
    condition: str | None = None  # "False Unschedulable: ..." of PodScheduled, if any


@dataclass(frozen=True)
class World:
    """The cluster as one runner's namespace sees it at one moment."""

    namespace: str
    snapshot: Snapshot
    pods: Mapping[str, PodView]  # the namespace's pods that exist


def claim_spec(pod: PodSpec, pod_claim: str, shared: Mapping[str, SharedClaim]) -> ClaimSpec:
    """The spec behind one of a pod's claims: its template, or the standalone claim it names."""
    entry = next(c for c in pod.claims if c.name == pod_claim)
    return entry.template if entry.template is not None else shared[entry.shared].spec


def soundness(world: World, specs: Mapping[str, PodSpec], shared: Mapping[str, SharedClaim], classes: Mapping[str, Selector],
              driver: str, truth: Callable[[Device], Device] | None = None) -> list[Violation]:
    """Every allocation of ours satisfies its claim on its pod's node; nothing over-committed anywhere.

    `truth` maps a published device to what the hardware really is (physical checks), if known."""
    snap = world.snapshot
    problems = (check_usage(snap.inventory, snap.allocations()) + physical_violations(snap.inventory, snap.allocations())
                + shared_memory_violations(snap.inventory, snap.allocations()))
    for name, spec in specs.items():
        pod = world.pods.get(name)
        if pod is None:
            continue
        for pod_claim, claim_name in pod.claims.items():
            observed = snap.claim(world.namespace, claim_name)
            if observed is None or not observed.results:
                if pod.node:
                    problems.append(Violation("soundness", f"pod {name} is bound to {pod.node} but claim {claim_name} is not allocated"))
                continue
            claim = claim_spec(spec, pod_claim, shared)
            if pod.node and observed.node != pod.node:
                problems.append(Violation("soundness", f"claim {claim_name} is allocated on {observed.node}, its pod {name} runs on {pod.node}",
                                          pod.node, observed.node))
            problems += check_claim(snap.inventory, claim, observed.results, observed.node, classes, observed.owner, truth)
            problems += config_copied(claim, observed, driver)
    return problems


def config_copied(claim: ClaimSpec, observed: ObservedClaim, driver: str) -> list[Violation]:
    """Every config entry of the claim reaches the allocation, and nothing else does.

    Compared as sets: the 1.34 allocator appends an entry once per request it names, so an entry
    naming two requests appears twice (harmless for a driver that applies it per request).
    """
    wanted = [dict(ClaimSpec.config_entry(n, p, driver), source="FromClaim") for n, p in claim.config]
    got = [c for c in observed.config if c.get("source") == "FromClaim"]
    key = lambda e: (tuple(sorted(e.get("requests") or [])), e["opaque"]["driver"], json.dumps(e["opaque"]["parameters"], sort_keys=True))  # noqa: E731
    if {key(e) for e in wanted} != {key(e) for e in got}:
        return [Violation("soundness", f"{observed.owner}: claim config not carried into the allocation", wanted, got)]
    return []


def completeness(pod: str, expected: Mapping[str, Solution] | None, scheduled: bool, bound: float, why: str | None) -> list[Violation]:
    """A pod the model places somewhere was scheduled within the bound (`scheduled`: it was)."""
    if not expected or scheduled:
        return []
    return [Violation("completeness", f"pod {pod} fits on {sorted(expected)} per the model but was not scheduled within {bound:.0f}s",
                      sorted(expected), why)]


def placement(pod: str, node: str, expected: Mapping[str, Solution]) -> list[Violation]:
    """A scheduled pod sits on a node where the model finds room for it."""
    if node in expected:
        return []
    return [Violation("soundness", f"pod {pod} was placed on {node}, where the model finds no room", sorted(expected), node)]


def fallback(pod: PodSpec, claims: Mapping[str, str], namespace: str, shared: Mapping[str, SharedClaim], before: Snapshot,
             after: Snapshot, solution: Solution, node: str) -> list[Violation] | None:
    """The chosen firstAvailable alternatives are the ones the model's search picks first on that node.

    None when the step cannot be judged: something other than this pod's claims changed meanwhile, so
    the node's state at decision time is unknown. `claims` maps the pod's claims to ResourceClaim names."""
    changed = {c.owner for c in after.allocated()} ^ {c.owner for c in before.allocated()}
    if changed - {f"{namespace}/{n}" for n in claims.values()}:
        return None
    to_allocate = [(entry, claims.get(entry.name)) for entry in pod.claims
                   if not (entry.shared and (before.claim(namespace, entry.shared) or _EMPTY).results)]
    problems = []
    for (entry, name), expected_choice in zip(to_allocate, solution.choices):
        observed = after.claim(namespace, name)
        spec = claim_spec(pod, entry.name, shared)
        chosen = []
        for request in spec.requests:
            names = {r.request for r in observed.results if r.request.split("/", 1)[0] == request.name}
            chosen.append(next((i for i in range(len(request.alternatives)) if request.result_name(i) in names), -1))
        if tuple(chosen) != tuple(expected_choice):
            labels = lambda choice: [spec.requests[i].result_name(c) if c >= 0 else None for i, c in enumerate(choice)]  # noqa: E731
            problems.append(Violation("fallback", f"claim {name} on {node}: the first feasible alternatives were not chosen",
                                      labels(expected_choice), labels(chosen)))
    return problems


def liveness(fitting: Mapping[str, Sequence[str]], why: Mapping[str, str | None], bound: float) -> list[Violation]:
    """Pending pods the model places somewhere (`fitting`: pod -> nodes) did not stay pending past the bound.

    Called when the bound ran out with every one of them still pending."""
    if not fitting:
        return []
    return [Violation("liveness", f"pending pods fit per the model but none was scheduled within {bound:.0f}s",
                      dict(fitting), dict(why))]


def released(snap: Snapshot, node: str) -> list[Violation]:
    """Repartitioning: with nothing of ours left on `node`, none of its devices is allocated and its
    counters are whole again."""
    devices = {d.id for d in snap.inventory.on_node(node)}
    held = [(c.owner, str(r.device)) for c in snap.allocated() for r in c.results if r.device in devices]
    problems = []
    if held:
        problems.append(Violation("repartitioning", f"{node}: devices still allocated after every pod released them", [], held))
    usage = Usage.of(snap.inventory, snap.allocations())
    for counter_set, consumed in usage.consumed.items():
        if counter_set.pool == node and any(consumed.values()):
            problems.append(Violation("repartitioning", f"{counter_set}: counters still consumed after release",
                                      0, {k: str(v) for k, v in consumed.items() if v}))
    return problems


class _Empty:
    results: list = []


_EMPTY = _Empty()
