"""Drive a workload on a live cluster, one step at a time, and check every step against the oracle.

Each runner owns one namespace (so examples can share a cluster) and records its steps (`steps.py`);
it observes and waits, the checks themselves are the pure functions of `properties.py`. When a check
fails it writes a replay bundle before raising. Between steps the cluster is quiescent: arrivals wait
until the pod is scheduled or rejected, departures until the pod's claims are released, and pending
pods that the model says now fit are waited for (liveness) before the next step.
"""

from __future__ import annotations

import os
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterable, Mapping, Sequence, TypeVar

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver.identity import DriverIdentity, current_identity
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import WaitTimeout, wait_for, wait_for_all
from testbed.workloads import properties
from testbed.workloads.bundle import write_bundle
from testbed.workloads.devices import Inventory
from testbed.workloads.model import ADMIN_NAMESPACE_LABEL, PLACEHOLDER_IMAGE, ClaimSpec, PodClaim, PodSpec, Request, SharedClaim, SubRequest
from testbed.workloads.observe import Snapshot, observe_claims
from testbed.workloads.oracle import ModelTooLarge, Solution, Usage, Violation, check_classes, class_selectors, feasible_nodes
from testbed.workloads.properties import PodView, World
from testbed.workloads.steps import AddShared, Arrive, Depart, Released, Step
from testbed.workloads.truth import true_device

BOUND_ENV = "DRA_TESTBED_SCHEDULE_BOUND"
DEFAULT_BOUND = 30.0  # seconds the scheduler gets to place a pod the model says fits
NAMESPACE_LABEL = "dra-testbed.io/properties"
T = TypeVar("T")
# What the node side shows after a step, judged against the namespace's pods (a World) and their specs: real
# kubelets only (testbed/conformance/node_watch.py); returns the violations.
NodeCheck = Callable[[World, Mapping[str, PodSpec]], list[Violation]]


def never_excused(t0: float, t1: float) -> float:  # noqa: ARG001 - the Runner.excused signature
    return 0.0


def allowed_wait(bound: float, excused: float) -> float:
    """How long a wait given `bound` seconds of up time may last when killed components were down for `excused`
    seconds of it.

    Kills leave the cluster's clients backing off exponentially (client-go's workqueue: 5 ms doubling up to
    1000 s per item), and a client that kept failing for t seconds tries next up to about t later. So once
    anything was down, the wait gets its whole allowance a second time. Seen without it, in a 100-kill KWOK
    run (kills 4-10 s apart): 154 s into a wait with 64 s of outages the controller-manager had not yet made
    the pod's claim from its template (its queue's back-off); the same seed passed with no kills."""
    allowance = bound + excused
    return 2 * allowance if excused > 0 else allowance


class PropertyFailure(AssertionError):
    """One or more properties broke; `violations` say which, `bundle` where the replay bundle is."""

    def __init__(self, violations: Sequence[Violation], bundle: Path | None) -> None:
        self.violations = list(violations)
        self.bundle = bundle
        lines = [f"[{v.property}] {v.message}" + (f" (expected {v.expected!r}, observed {v.observed!r})" if v.expected is not None or v.observed is not None else "")
                 for v in self.violations]
        where = f"\nreplay bundle: {bundle}  (dra-testbed replay {bundle})" if bundle else ""
        super().__init__("\n".join(lines) + where)


@dataclass
class Runner:
    """One example's namespace on a live cluster, its pods and claims, and the checks after every step."""

    api: client.ApiClient
    layout_yaml: str
    bundle_dir: Path | None = None
    identity: DriverIdentity = field(default_factory=current_identity)
    bound: float = field(default_factory=lambda: float(os.environ.get(BOUND_ENV, DEFAULT_BOUND)))
    namespace: str = field(default_factory=lambda: f"prop-{uuid.uuid4().hex[:10]}")
    pods: dict[str, PodSpec] = field(default_factory=dict)
    shared: dict[str, SharedClaim] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    # pods the model could not decide (too large a search): completeness is not claimed for them
    undecided: set[str] = field(default_factory=set)
    context: dict = field(default_factory=dict)  # extra facts for the bundle (faults, seed, ...)
    # seconds of [t0, t1] (monotonic) during which the cluster was down on purpose (a fault campaign's kills
    # and the restarts after them): every bound counts only the rest, so a restart does not eat it
    excused: Callable[[float, float], float] = never_excused
    # what the checks saw, for reports and for tests that a property was exercised at all
    stats: dict[str, int] = field(default_factory=dict)
    # on real kubelets: the pods' containers run `image` with `args`, departures take `grace` seconds (so the
    # kubelet unprepares before the pod leaves the API and its devices are allocated again), and `node_check`
    # judges the node side after every step
    image: str = PLACEHOLDER_IMAGE
    args: tuple[str, ...] = ()
    grace: int = 0
    node_check: NodeCheck | None = None

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.resource = client.ResourceV1Api(self.api)
        self.classes = class_selectors(self.identity)
        self._serialize = self.api.sanitize_for_serialization

    # --- life cycle ---------------------------------------------------------------------------------

    def open(self) -> Runner:
        served = {c.metadata.name: [s.cel.expression for s in c.spec.selectors or []] for c in self.resource.list_device_class().items}
        check_classes(self.identity, served)
        labels = {NAMESPACE_LABEL: "true", ADMIN_NAMESPACE_LABEL: "true"}
        create_namespace(self.core, self.namespace, labels, within=self._bounded)  # kills may delay the account
        return self

    def close(self) -> None:
        """Delete every pod and claim of the namespace and wait until their devices are free again."""
        try:
            self.core.delete_collection_namespaced_pod(self.namespace, grace_period_seconds=self.grace)
            self.resource.delete_collection_namespaced_resource_claim(self.namespace)
            self._wait_until_empty(self.resource.list_namespaced_resource_claim, timeout=max(self.bound, 60))
        finally:
            try:
                self.core.delete_namespace(self.namespace, body=client.V1DeleteOptions(grace_period_seconds=0))
            except ApiException as exc:
                if exc.status != 404:
                    raise

    def _wait_until_empty(self, list_func: Callable, timeout: float, name: str | None = None) -> None:
        """Until nothing (or no object called `name`) is left in our namespace."""
        self._await(list_func, lambda objects: not objects, timeout, name=name, what=f"{name or 'objects'} gone")

    def _await(self, list_func: Callable, done: Callable[[dict], bool], timeout: float, *, name: str | None = None,
               what: str = "condition") -> dict:
        """Our namespace's objects of `list_func` once `done(objects by name)` holds."""
        return self._bounded(lambda left: wait_for_all(list_func, done, namespace=self.namespace, name=name, timeout=left,
                                                       what=f"{what} in {self.namespace}"), timeout)

    def _bounded(self, wait: Callable[[float], T], bound: float) -> T:
        """`wait(timeout)` given `bound` seconds of time the cluster was up: when it times out, it waits again
        for as long as the cluster was down meanwhile and its clients' back-off (`allowed_wait`)."""
        start = time.monotonic()
        left = bound
        while True:
            try:
                return wait(left)
            except WaitTimeout as exc:
                now = time.monotonic()
                allowed = allowed_wait(bound, self.excused(start, now))
                left = allowed - (now - start)
                if left <= 0.1:
                    exc.excused = allowed - bound  # type: ignore[attr-defined] - for the failure's message
                    raise

    # --- observation --------------------------------------------------------------------------------

    def snapshot(self) -> Snapshot:
        return Snapshot(Inventory.from_api(self.resource), observe_claims(self.resource))

    def world(self, snap: Snapshot | None = None) -> World:
        """The namespace's pods with `snap` (or a new snapshot): what the property checks judge."""
        snap = snap or self.snapshot()
        pods = {}
        for pod in self.core.list_namespaced_pod(self.namespace).items:
            name = pod.metadata.name
            claims = {c.name: c.shared for c in self.pods[name].claims if c.shared} if name in self.pods else {}
            claims.update({s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or [] if s.resource_claim_name})
            pods[name] = PodView(name, pod.spec.node_name, claims, _condition(pod))
        return World(self.namespace, snap, pods)

    def pod_claims(self, pod_name: str) -> dict[str, str]:
        """Pod claim name -> ResourceClaim name, for the claims that exist so far."""
        spec = self.pods[pod_name]
        names = {c.name: c.shared for c in spec.claims if c.shared}
        try:
            pod = self.core.read_namespaced_pod(pod_name, self.namespace)
        except ApiException as exc:
            if exc.status == 404:
                return names
            raise
        for status in pod.status.resource_claim_statuses or []:
            if status.resource_claim_name:
                names[status.name] = status.resource_claim_name
        return names

    def _pending_claims(self, pod: PodSpec, snap: Snapshot) -> tuple[list[ClaimSpec], list[str] | None]:
        """The pod's claims still to allocate (pod order) and the nodes allowed by already allocated ones."""
        claims, pinned = [], None
        for entry in pod.claims:
            observed = snap.claim(self.namespace, entry.shared) if entry.shared else None
            if observed is not None and observed.results:
                node = observed.node
                pinned = [node] if pinned is None or pinned == [node] else []
            else:
                claims.append(properties.claim_spec(pod, entry.name, self.shared))
        if pod.node:
            pinned = [pod.node] if pinned is None or pod.node in pinned else []
        return claims, pinned

    def expected_nodes(self, pod: PodSpec, snap: Snapshot) -> dict[str, Solution] | None:
        """Where the model says the pod fits now (None: too large to decide)."""
        claims, pinned = self._pending_claims(pod, snap)
        usage = Usage.of(snap.inventory, snap.allocations())
        try:
            return feasible_nodes(snap.inventory, claims, usage, self.classes, pinned)
        except ModelTooLarge:
            return None

    # --- checks -------------------------------------------------------------------------------------

    def soundness(self, snap: Snapshot) -> list[Violation]:
        """Every allocation of ours satisfies its claim on its pod's node; nothing over-committed anywhere."""
        return properties.soundness(self.world(snap), self.pods, self.shared, self.classes, self.identity.driver, true_device)

    def fail_if(self, problems: list[Violation], snap: Snapshot | None = None) -> None:
        if not problems:
            return
        bundle = None
        if self.bundle_dir is not None:
            snap = snap or self.snapshot()
            bundle = write_bundle(self.bundle_dir, layout_yaml=self.layout_yaml, steps=self.steps,
                                  manifests=self._manifests(), violations=[v.as_dict() for v in problems],
                                  observed=self._observed(snap), context=self.context)
        raise PropertyFailure(problems, bundle)

    def _manifests(self) -> list[dict]:
        docs = [s.manifest(self.identity.driver) for s in self.shared.values()]
        for pod in self.pods.values():
            docs += pod.manifests(self.identity.driver)
        return docs

    def _observed(self, snap: Snapshot) -> dict:
        pods = self.core.list_namespaced_pod(self.namespace).items
        return {
            "pods": {p.metadata.name: {"node": p.spec.node_name, "conditions": [
                {"type": c.type, "status": c.status, "reason": c.reason, "message": c.message} for c in p.status.conditions or []]}
                for p in pods},
            "claims": {c.owner: {"node": c.node, "results": [{"request": r.request, "device": str(r.device), "admin": r.admin} for r in c.results],
                                 "reservedFor": c.reserved_for} for c in snap.claims},
            "slices": [self._serialize(s) for s in self.resource.list_resource_slice().items],
        }

    # --- steps --------------------------------------------------------------------------------------

    def add_shared(self, claim: SharedClaim) -> None:
        """Create a standalone claim that pods may reference (allocated with its first pod)."""
        self.steps.append(AddShared(claim))
        self.resource.create_namespaced_resource_claim(self.namespace, claim.manifest(self.identity.driver))
        self.shared[claim.name] = claim

    def arrive(self, pod: PodSpec) -> bool:
        """Create the pod; check completeness, soundness and fallback. Returns whether it got scheduled."""
        self.steps.append(Arrive(pod))
        before = self.snapshot()
        self.pods[pod.name] = pod
        expected = self.expected_nodes(pod, before)
        for doc in pod.manifests(self.identity.driver, self.image, self.args):
            if doc["kind"] == "ResourceClaimTemplate":
                self.resource.create_namespaced_resource_claim_template(self.namespace, doc)
            else:
                self.core.create_namespaced_pod(self.namespace, doc)
        if expected is None:
            self.undecided.add(pod.name)
            self._count("undecided")
        fits = bool(expected)
        try:
            observed = self._bounded(lambda left: wait_for(
                self.core.list_namespaced_pod, _scheduled if fits else _decided, namespace=self.namespace, name=pod.name,
                timeout=left, what=f"pod {pod.name} {'scheduled' if fits else 'scheduled or rejected'}"), self.bound)
        except WaitTimeout as exc:
            if not fits:
                raise  # the scheduler never even answered: an infrastructure problem, not a property
            observed = self.core.read_namespaced_pod(pod.name, self.namespace)
            why = _condition(observed) or str(exc)
            if getattr(exc, "excused", 0):
                why += f" (and {exc.excused:.0f}s more for killed components to come back and their clients to retry)"
            self.fail_if(properties.completeness(pod.name, expected, False, self.bound, why))  # the wait ran out
        after = self.snapshot()
        problems = self.soundness(after)
        node = observed.spec.node_name
        if node and expected is not None:
            problems += properties.placement(pod.name, node, expected) or self._fallback(pod, before, after, expected[node], node)
        self._count("scheduled" if node else "rejected")
        if node and _sharing(after):
            self._count("co-located")  # a GPU holds shares of two claims or more: sharing was exercised
        self.fail_if(problems or self._node_side(after), after)
        return bool(node)

    def _fallback(self, pod: PodSpec, before: Snapshot, after: Snapshot, solution: Solution, node: str) -> list[Violation]:
        """The chosen firstAvailable alternatives are the ones the model's search picks first on that node."""
        problems = properties.fallback(pod, self.pod_claims(pod.name), self.namespace, self.shared, before, after, solution, node)
        self._count("fallback-skipped" if problems is None else "fallback-checked")
        return problems or []

    def depart(self, pod_name: str) -> None:
        """Delete the pod; wait until its claims are released; then wait for pods that now fit (liveness)."""
        self.steps.append(Depart(pod_name))
        claims = self.pod_claims(pod_name)
        self.core.delete_namespaced_pod(pod_name, self.namespace, grace_period_seconds=self.grace)
        self.released(pod_name, claims)
        self.settle()

    def released(self, pod_name: str, claims: dict[str, str]) -> None:
        """The pod is gone or going (deleted, evicted): wait until it is gone and its `claims` (pod claim ->
        ResourceClaim, read while it was there) are released; it is no longer ours."""
        spec = self.pods.pop(pod_name)
        self._wait_until_empty(self.core.list_namespaced_pod, max(self.bound, 60), name=pod_name)
        for entry in spec.claims:
            name = claims.get(entry.name)
            if name is None:
                continue
            if entry.template is not None:
                self._wait_until_empty(self.resource.list_namespaced_resource_claim, max(self.bound, 60), name=name)
            else:
                self._await(self.resource.list_namespaced_resource_claim,
                            lambda objects: all(pod_name not in _reserved_for(c) for c in objects.values()),
                            max(self.bound, 60), name=name, what=f"{name} released by {pod_name}")

    def settle(self) -> None:
        """Wait until no pending pod fits per the model: each that does must get scheduled within the bound."""
        while True:
            snap = self.snapshot()
            pods = {p.metadata.name: p for p in self.core.list_namespaced_pod(self.namespace).items}
            pending = [name for name in self.pods if name in pods and not pods[name].spec.node_name]
            fitting = {}
            for name in pending:
                expected = self.expected_nodes(self.pods[name], snap)
                if expected:
                    fitting[name] = sorted(expected)
            if not fitting:
                self.fail_if(self.soundness(snap) or self._node_side(snap), snap)
                return
            self._count("liveness-waits")
            try:
                self._await(self.core.list_namespaced_pod,
                            lambda objects: any(objects[n].spec.node_name for n in pending if n in objects),
                            self.bound, what="a pending pod to be scheduled")
            except WaitTimeout:
                self.fail_if(properties.liveness(fitting, {n: _condition(pods[n]) for n in fitting}, self.bound), snap)

    def _node_side(self, snap: Snapshot) -> list[Violation]:
        """The node check's violations after a step (none without one)."""
        if self.node_check is None:
            return []
        self._count("node-checks")
        return self.node_check(self.world(snap), self.pods)

    def _count(self, key: str) -> None:
        self.stats[key] = self.stats.get(key, 0) + 1

    def check_released(self, node: str) -> None:
        """Repartitioning: with nothing of ours left on `node`, its counters are whole again and every GPU
        can be taken as a full GPU at once."""
        self.steps.append(Released(node))
        snap = self.snapshot()
        self.fail_if(properties.released(snap, node), snap)
        gpus = sum(1 for d in snap.inventory.on_node(node) if d.attribute("type") == "gpu")
        if not gpus:
            return
        full = ClaimSpec((Request("full", (SubRequest("full", self.identity.gpu_class, count=gpus),)),))
        name = f"full-{node}-{len(self.steps)}"
        mark = len(self.steps)  # the probe pod is part of this step, not steps of its own (replay re-runs it)
        if not self.arrive(PodSpec(name, (PodClaim("t0", template=full),), node=node)):
            self.fail_if([Violation("repartitioning", f"{node}: its {gpus} full GPU(s) cannot be allocated after every partition was released",
                                    "scheduled", _condition(self.core.read_namespaced_pod(name, self.namespace)))])
        self.depart(name)
        del self.steps[mark:]

    # --- replay -------------------------------------------------------------------------------------

    def run_steps(self, steps: Iterable[Step]) -> None:
        """Re-run recorded steps (a bundle's `steps`)."""
        for step in steps:
            if isinstance(step, AddShared):
                self.add_shared(step.claim)
            elif isinstance(step, Arrive):
                self.arrive(step.pod)
            elif isinstance(step, Depart):
                self.depart(step.pod)
            elif isinstance(step, Released):
                self.check_released(step.node)
            else:
                raise ValueError(f"unknown step {step!r}")


def _sharing(snap: Snapshot) -> bool:
    """Some device holds shares of two claims or more."""
    owners: dict = {}
    for owner, results in snap.allocations():
        for result in results:
            if result.share_id is not None:
                owners.setdefault(result.device, set()).add(owner)
    return any(len(o) > 1 for o in owners.values())


def _scheduled(pod) -> bool:
    return bool(pod.spec.node_name)


def _decided(pod) -> bool:
    """Scheduled, or the scheduler said why not (Unschedulable, or an error such as a CEL runtime error)."""
    return bool(pod.spec.node_name) or any(c.type == "PodScheduled" and c.status == "False" for c in pod.status.conditions or [])


def _condition(pod) -> str | None:
    for c in pod.status.conditions or []:
        if c.type == "PodScheduled":
            return f"{c.status} {c.reason}: {c.message}"
    return None


def _reserved_for(claim) -> list[str]:
    return [r.name for r in (claim.status.reserved_for or [])] if claim.status else []
