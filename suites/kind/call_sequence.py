"""The same pod lifecycles on any bed running our driver with its call log on, and the calls they made.

Each scenario is a list of steps (create a pod and wait until it runs, delete one and wait until it is gone
and the claims it was the last user of are unprepared), run one after the other in one namespace on one
node. Every step then waits until the plugin's log has been quiet for QUIET seconds, so a call made late
for a step is not counted in the next. A call is attributed to the step during which the plugin logged it
(both clocks are the host's CLOCK_MONOTONIC: kind's nodes are containers on the same kernel); claim uids
and generated names become the pod's name for the claim; timestamps are dropped after that.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.kubeletplugin.calllog import Call, parse_calls
from suites.kind.pods import claim_template
from testbed.kube.apiviews import ApiViews
from testbed.kubelet.standin import extended_claim
from testbed.kube.waiting import wait_for, wait_for_all

IDENTITY = current_identity()
TEMPLATE, SHARED = "one-1g", "shared"  # a 1g.10gb MIG device per claim, made from the template / one claim for all
EXTENDED = "extended"  # the label of the claim the scheduler makes for a pod's `nvidia.com/gpu`
REGISTRATION = ("GetInfo", "NotifyRegistrationStatus", "NodeWatchResources")
QUIET = 3.0
TIMEOUT = 180.0


@dataclass(frozen=True)
class Step:
    """Create `pod` (with `claims`: pod claim name -> template or claim name) or delete it (`force`: grace 0)."""

    action: str
    pod: str
    claims: tuple[tuple[str, str], ...] = ()
    init: bool = False  # an init container using the claims too
    extended: bool = False  # no claims of its own: `nvidia.com/gpu: 1` (DRAExtendedResource)
    force: bool = False


def create(pod: str, *claims: tuple[str, str], init: bool = False, extended: bool = False) -> Step:
    return Step("create", pod, tuple(claims), init, extended)


def delete(pod: str, force: bool = False) -> Step:
    return Step("delete", pod, force=force)


SCENARIOS: dict[str, list[Step]] = {
    "one-claim": [create("solo", ("gpu", TEMPLATE)), delete("solo")],
    "two-claims": [create("pair", ("a", TEMPLATE), ("b", TEMPLATE)), delete("pair")],
    "shared-claim": [create("first", ("gpu", SHARED)), create("second", ("gpu", SHARED)), delete("first"), delete("second")],
    "init-container": [create("init", ("gpu", TEMPLATE), init=True), delete("init")],
    "force-delete": [create("forced", ("gpu", TEMPLATE)), delete("forced", force=True)],
    "extended-resource": [create("legacy", extended=True), delete("legacy")],
}

Normalised = tuple[str, str, str, tuple[str, ...]]  # (step, method, service, claim labels in request order)


@dataclass
class Recording:
    """What one bed's plugin was asked: registration calls, and per scenario its normalised calls."""

    registration: list[tuple[str, bool | None]]
    scenarios: dict[str, list[Normalised]]


def templates() -> list[dict]:
    """The claim template and the shared claim every scenario draws from."""
    template = claim_template(TEMPLATE, IDENTITY.mig_class, f"device.attributes['{IDENTITY.driver}'].profile == '1g.10gb'")
    shared = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": SHARED}, "spec": template["spec"]["spec"]}
    return [template, shared]


def pod_manifest(step: Step, node: str, image: str) -> dict:
    """The pod of a create step, bound by the scheduler to `node`."""
    claims = [{"name": n, "resourceClaimTemplateName" if source == TEMPLATE else "resourceClaimName": source} for n, source in step.claims]
    uses = {"claims": [{"name": n} for n, _ in step.claims]}
    main = {"name": "main", "image": image, "imagePullPolicy": "Never", "args": ["--sleep"],
            "resources": {"limits": {IDENTITY.extended_resource: "1"}} if step.extended else uses}
    spec = {"nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1, "containers": [main]}
    if claims:
        spec["resourceClaims"] = claims
    if step.init:
        spec["initContainers"] = [{"name": "first", "image": image, "imagePullPolicy": "Never", "args": [], "resources": uses}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": step.pod}, "spec": spec}


@dataclass
class Runner:
    """Runs the scenarios on one bed: `api` (ApiViews), the pods' `node`, their `image`, and `read_log`
    returning the plugin's call log as text."""

    api: ApiViews
    namespace: str
    node: str
    image: str
    read_log: Callable[[], str]
    labels: dict[str, str] = field(default_factory=dict)  # claim name -> label
    users: dict[str, set[str]] = field(default_factory=dict)  # claim name -> pods using it
    marks: list[tuple[float, str, str]] = field(default_factory=list)  # (start, scenario, step)

    def run(self) -> Recording:
        for manifest in templates():
            self._create_claim_object(manifest)
        for scenario, steps in SCENARIOS.items():
            for step in steps:
                self.marks.append((time.monotonic(), scenario, f"{step.action} {step.pod}"))
                if step.action == "create":
                    self._create(step)
                else:
                    self._delete(step)
                self._quiet()
        return self.recording(parse_calls(self.read_log()))

    def _create_claim_object(self, manifest: dict) -> None:
        if manifest["kind"] == "ResourceClaimTemplate":
            self.api.resource.create_namespaced_resource_claim_template(self.namespace, manifest)
        else:
            self.api.resource.create_namespaced_resource_claim(self.namespace, manifest)

    def _create(self, step: Step) -> None:
        self.api.core.create_namespaced_pod(self.namespace, pod_manifest(step, self.node, self.image))
        pod = wait_for(self.api.core.list_namespaced_pod, lambda p: p.status.phase == "Running", name=step.pod,
                       namespace=self.namespace, what=f"pod {step.pod} to run", timeout=TIMEOUT)
        statuses = {s.name: s.resource_claim_name for s in pod.status.resource_claim_statuses or []}
        for claim, source in step.claims:
            name = source if source == SHARED else statuses[claim]
            self.labels[name] = source if source == SHARED else f"{step.pod}/{claim}"
            self.users.setdefault(name, set()).add(step.pod)
        if step.extended:
            name = extended_claim(pod)
            assert name, f"pod {step.pod} asks {IDENTITY.extended_resource} but the scheduler made no claim for it"
            self.labels[name] = f"{step.pod}/{EXTENDED}"
            self.users.setdefault(name, set()).add(step.pod)

    def _delete(self, step: Step) -> None:
        since = time.monotonic()
        self.api.core.delete_namespaced_pod(step.pod, self.namespace, grace_period_seconds=0 if step.force else None)
        wait_for_all(self.api.core.list_namespaced_pod, lambda pods: not pods, name=step.pod, namespace=self.namespace,
                     what=f"pod {step.pod} gone", timeout=TIMEOUT)
        for pods in self.users.values():
            pods.discard(step.pod)
        last = [name for name, pods in self.users.items() if not pods]
        for name in last:
            del self.users[name]
        # the claims this pod was the last user of are unprepared on either kubelet; waiting for that keeps
        # a late call out of the next step (a call that never comes fails here)
        deadline = since + TIMEOUT
        while not all(self._unprepared(name, since) for name in last):
            assert time.monotonic() < deadline, f"claims {last} of pod {step.pod} not unprepared after {TIMEOUT:.0f} s"
            time.sleep(0.5)

    def _unprepared(self, name: str, since: float) -> bool:
        return any(c.method == "NodeUnprepareResources" and c.t >= since and (self.namespace, name) in {(ns, n) for ns, n, _ in c.claims}
                   for c in parse_calls(self.read_log()))

    def _quiet(self) -> None:
        """Return once the log has not grown for QUIET seconds."""
        size, since = len(self.read_log()), time.monotonic()
        while time.monotonic() - since < QUIET:
            time.sleep(0.5)
            now = len(self.read_log())
            if now != size:
                size, since = now, time.monotonic()

    def recording(self, calls: list[Call]) -> Recording:
        """The calls normalised: registration apart, the rest per scenario and step (this namespace only)."""
        registration = [(c.method, c.registered) for c in calls if c.method in REGISTRATION]
        scenarios: dict[str, list[Normalised]] = {name: [] for name in SCENARIOS}
        for call in calls:
            if call.method in REGISTRATION or not any(ns == self.namespace for ns, _, _ in call.claims):
                continue
            started = [m for m in self.marks if m[0] <= call.t]
            if not started:
                continue  # before the first step: not this run's
            _, scenario, step = started[-1]
            scenarios[scenario].append((step, call.method, call.service, tuple(self.labels.get(n, f"unknown:{n}") for _, n, _ in call.claims)))
        return Recording(registration, scenarios)


@dataclass(frozen=True)
class Allowed:
    """A difference that is the real kubelet's own: `drop` says which of its normalised calls the stand-in
    legitimately does not make."""

    name: str
    reason: str
    drop: Callable[[Normalised], bool]


def compare(kubelet: list, standin: list, allowed: tuple[Allowed, ...] = ()) -> list[str]:
    """[] when the stand-in's calls equal the kubelet's less the allowed differences; else both, line by line."""
    expected = [c for c in kubelet if not any(a.drop(c) for a in allowed)]
    if expected == standin:
        return []
    return [f"kubelet:  {c}" for c in expected] + [f"stand-in: {c}" for c in standin]
