"""Pods that hold claims on real kubelets and say what NVML shows inside them (the node-side probes' eyes).

Every container runs the subject's workload image, whose entry point prints one JSON line of what NVML
shows (fake_gpus/nvml/report.py on nvidia-ml-py) and, with `--sleep`, stays up. A container's view is
read from its log, or taken again by exec. What a view is compared with comes from the API only: the
claim's allocation results and the published devices they name.
"""

from __future__ import annotations

import json
import time
import uuid
from collections import Counter
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.stream import stream

from testbed.conformance.outcome import CheckFailed
from testbed.conformance.subject import Subject
from testbed.kube.waiting import WaitTimeout, wait_gone

START_TIMEOUT = 180.0  # a pod's claims prepared and its containers up (kind on a loaded machine; the fault matrix lowers it)
GONE_TIMEOUT = 120.0
REPORT = ["/usr/bin/python3", "/usr/local/bin/nvml-report"]


@dataclass
class Container:
    """A container of a probe pod and the pod-level claim names it uses."""

    name: str
    claims: list[str]
    init: bool = False  # an init container prints and exits; the others stay up


@dataclass
class PodPlan:
    """A probe pod: claims by pod-level name (a template to instantiate, or an existing claim), its containers."""

    node: str
    templates: dict[str, dict] = field(default_factory=dict)  # name -> DeviceClaim spec (devices: ...)
    claims: dict[str, str] = field(default_factory=dict)  # name -> existing ResourceClaim
    containers: list[Container] = field(default_factory=lambda: [Container("main", ["gpu"])])
    # every container privileged: all of the node's device nodes, the MIG monitor capability among them
    privileged: bool = False


def devices_spec(device_class: str, selector: str = "true", count: int | None = None, all_devices: bool = False,
                 admin: bool = False) -> dict:
    """A DeviceClaim spec with one request `gpu`."""
    exactly: dict = {"deviceClassName": device_class, "selectors": [{"cel": {"expression": selector}}]}
    if all_devices:
        exactly["allocationMode"] = "All"
    elif count is not None:
        exactly["count"] = count
    if admin:
        exactly["adminAccess"] = True
    return {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}


def create_claim(subject: Subject, namespace: str, spec: dict) -> str:
    """A standalone ResourceClaim; returns its name."""
    name = f"c-{uuid.uuid4().hex[:6]}"
    subject.resource.create_namespaced_resource_claim(namespace, {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
                                                                   "metadata": {"name": name}, "spec": spec})
    return name


def start(subject: Subject, namespace: str, plan: PodPlan) -> str:
    """Create the plan's templates and pod (pinned to its node); returns the pod name."""
    suffix = uuid.uuid4().hex[:6]
    refs = []
    for name, spec in plan.templates.items():
        template = f"t-{suffix}-{name}"
        subject.resource.create_namespaced_resource_claim_template(namespace, {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": template}, "spec": {"spec": spec}})
        refs.append({"name": name, "resourceClaimTemplateName": template})
    refs += [{"name": name, "resourceClaimName": claim} for name, claim in plan.claims.items()]

    def container(c: Container) -> dict:
        body = {"name": c.name, "image": subject.workload_image, "imagePullPolicy": "IfNotPresent",
                "args": [] if c.init else ["--sleep"], "resources": {"claims": [{"name": n} for n in c.claims]}}
        if plan.privileged:
            body["securityContext"] = {"privileged": True}
        return body

    spec = {"nodeSelector": {"kubernetes.io/hostname": plan.node}, "terminationGracePeriodSeconds": 1, "resourceClaims": refs,
            "containers": [container(c) for c in plan.containers if not c.init]}
    inits = [container(c) for c in plan.containers if c.init]
    if inits:
        spec["initContainers"] = inits
    name = f"p-{suffix}"
    subject.core.create_namespaced_pod(namespace, {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec})
    return name


def events(subject: Subject, namespace: str, pod: str) -> list[str]:
    """The pod's events, oldest first, as `reason: message`."""
    found = subject.core.list_namespaced_event(namespace, field_selector=f"involvedObject.name={pod}").items
    found.sort(key=lambda e: e.last_timestamp or e.event_time or e.metadata.creation_timestamp)
    return [f"{e.reason}: {e.message}" for e in found]


def wait_running(subject: Subject, namespace: str, pod: str, timeout: float | None = None) -> client.V1Pod:
    """The pod once every container is ready; CheckFailed with its events when it is not within `timeout`
    (default START_TIMEOUT)."""
    timeout = timeout or START_TIMEOUT
    deadline = time.monotonic() + timeout
    while True:
        now = subject.core.read_namespaced_pod(pod, namespace)
        statuses = now.status.container_statuses or []
        if now.status.phase == "Running" and statuses and all(c.ready for c in statuses):
            return now
        if now.status.phase in ("Failed", "Succeeded") or time.monotonic() > deadline:
            seen = events(subject, namespace, pod)[-4:]
            raise CheckFailed(f"pod {pod} on {now.spec.node_name or 'no node'} did not run within {timeout:.0f}s "
                              f"(phase {now.status.phase}); last events: {seen}")
        time.sleep(1)


def run(subject: Subject, namespace: str, plan: PodPlan, timeout: float | None = None) -> str:
    """start + wait_running; returns the pod name."""
    pod = start(subject, namespace, plan)
    wait_running(subject, namespace, pod, timeout)
    return pod


def view(subject: Subject, namespace: str, pod: str, container: str = "main", timeout: float = 30.0) -> dict:
    """What NVML showed the container at its start (the last JSON line of its log)."""
    deadline = time.monotonic() + timeout
    while True:
        lines = subject.core.read_namespaced_pod_log(pod, namespace, container=container).strip().splitlines()
        if lines:
            return json.loads(lines[-1])
        if time.monotonic() > deadline:
            raise CheckFailed(f"container {container} of pod {pod} printed no NVML report within {timeout:.0f}s")
        time.sleep(0.5)


def view_now(subject: Subject, namespace: str, pod: str, container: str = "main") -> dict:
    """What NVML shows the running container now (the report run again by exec)."""
    out = stream(subject.core.connect_get_namespaced_pod_exec, pod, namespace, container=container, command=REPORT,
                 stderr=True, stdin=False, stdout=True, tty=False, _preload_content=True)
    return json.loads(out.strip().splitlines()[-1])


def claims_of(subject: Subject, namespace: str, pod: str) -> dict[str, str]:
    """Pod-level claim name -> ResourceClaim name, as the pod's status (templates) and spec (claims) say."""
    now = subject.core.read_namespaced_pod(pod, namespace)
    named = {r.name: r.resource_claim_name for r in now.spec.resource_claims or [] if r.resource_claim_name}
    named.update({s.name: s.resource_claim_name for s in now.status.resource_claim_statuses or [] if s.resource_claim_name})
    return named


def allocated(subject: Subject, namespace: str, claim: str) -> list[dict]:
    """The published devices (API dicts, with `pool` added) the claim's allocation names for the subject's driver."""
    body = subject.api.sanitize_for_serialization(subject.resource.read_namespaced_resource_claim(claim, namespace))
    results = (((body.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    published = {(s["spec"]["pool"]["name"], d["name"]): d for s in subject.slices() for d in s["spec"].get("devices") or []}
    found = []
    for r in results:
        if r["driver"] != subject.driver:
            continue
        device = published.get((r["pool"], r["device"]))
        if device is None:
            raise CheckFailed(f"claim {claim} was allocated {r['pool']}/{r['device']}, which no slice of {subject.driver} publishes")
        found.append({**device, "pool": r["pool"], "adminAccess": bool(r.get("adminAccess"))})
    return found


def attribute(subject: Subject, device: dict, name: str):
    """A device attribute's value (any type), by NVIDIA's name, qualified or not; None when absent."""
    attrs = device.get("attributes") or {}
    value = attrs.get(name) or attrs.get(f"{subject.driver}/{name}")
    return next(iter(value.values())) if value else None


def mig_profile(nvml_name: str) -> str:
    """The profile of a MIG device as NVML names it (`NVIDIA H100 80GB HBM3 MIG 1g.10gb` -> `1g.10gb`)."""
    return nvml_name.rsplit("MIG ", 1)[-1].strip()


def seen(report: dict) -> tuple[set[str], Counter]:
    """Whole GPUs (UUIDs of GPUs showing no MIG device) and MIG devices (parent UUID -> count) of a view."""
    if report.get("error"):
        raise CheckFailed(f"NVML failed in the container: {report['error']}")
    whole = {d["uuid"] for d in report.get("devices") or [] if not d.get("mig_devices")}
    migs = Counter({d["uuid"]: len(d["mig_devices"]) for d in report.get("devices") or [] if d.get("mig_devices")})
    return whole, migs


def expected(subject: Subject, devices: list[dict]) -> tuple[set[str], int, set[str]]:
    """What a container holding `devices` must see: whole-GPU UUIDs, the number of MIG devices, and the
    UUIDs of those MIG devices that publish one (existing instances)."""
    whole = {attribute(subject, d, "uuid") for d in devices if attribute(subject, d, "type") != "mig"}
    migs = [d for d in devices if attribute(subject, d, "type") == "mig"]
    return whole, len(migs), {u for u in (attribute(subject, d, "uuid") for d in migs) if u}


def sees_exactly(subject: Subject, report: dict, devices: list[dict], who: str) -> None:
    """CheckFailed unless the view shows exactly `devices`: those whole GPUs, that many MIG devices."""
    whole, migs = seen(report)
    want_whole, want_migs, want_mig_uuids = expected(subject, devices)
    mig_uuids = {m["uuid"] for d in report.get("devices") or [] for m in d.get("mig_devices") or []}
    if whole != want_whole or sum(migs.values()) != want_migs or not want_mig_uuids <= mig_uuids:
        raise CheckFailed(f"{who} sees whole GPUs {sorted(whole)} and {sum(migs.values())} MIG device(s) {sorted(mig_uuids)}; "
                          f"allocated: whole GPUs {sorted(want_whole)} and {want_migs} MIG device(s) {sorted(want_mig_uuids)}")


def mig_keys(subject: Subject, devices: list[dict]) -> Counter:
    """The MIG devices among published `devices` as (parent GPU UUID, profile), counted."""
    return Counter((attribute(subject, d, "parentUUID"), attribute(subject, d, "profile")) for d in devices
                   if attribute(subject, d, "type") == "mig")


def mig_keys_seen(report: dict) -> Counter:
    """The MIG devices of an NVML view as (parent GPU UUID, profile), counted."""
    return Counter((d["uuid"], mig_profile(m["name"])) for d in report.get("devices") or [] for m in d.get("mig_devices") or [])


def view_mismatch(subject: Subject, report: dict, devices: list[dict]) -> str | None:
    """Why an NVML view does not show exactly `devices`, or None when it does: whole GPUs by UUID, MIG devices
    by parent GPU and profile (and by UUID where one is published). A container holding nothing may have no
    NVML at all (nothing mounts the library)."""
    if report.get("error"):
        return None if not devices else f"NVML failed in the container: {report['error']}"
    whole, _ = seen(report)
    want_whole, _, want_uuids = expected(subject, devices)
    got, want = mig_keys_seen(report), mig_keys(subject, devices)
    uuids = {m["uuid"] for d in report.get("devices") or [] for m in d.get("mig_devices") or []}
    if whole == want_whole and got == want and want_uuids <= uuids:
        return None
    return (f"sees whole GPUs {sorted(whole)} and MIG devices {sorted(got.elements())}; allocated: whole GPUs {sorted(want_whole)} "
            f"and MIG devices {sorted(want.elements())}" + (f" (UUIDs {sorted(want_uuids - uuids)} not seen)" if want_uuids - uuids else ""))


def delete(subject: Subject, namespace: str, pod: str, force: bool = False, timeout: float = GONE_TIMEOUT) -> None:
    """Delete the pod (force: grace 0, as `kubectl delete --force`) and wait until it and its generated
    claims are gone."""
    claims = [c for c in claims_of(subject, namespace, pod).values()]
    owned = []
    for c in claims:
        try:
            meta = subject.resource.read_namespaced_resource_claim(c, namespace).metadata
            if any(o.kind == "Pod" for o in meta.owner_references or []):
                owned.append(c)
        except ApiException as exc:
            if exc.status != 404:
                raise
    body = client.V1DeleteOptions(grace_period_seconds=0) if force else client.V1DeleteOptions()
    subject.core.delete_namespaced_pod(pod, namespace, body=body)
    deadline = time.monotonic() + timeout
    for read, name in [(subject.core.read_namespaced_pod, pod)] + [(subject.resource.read_namespaced_resource_claim, c) for c in owned]:
        try:
            wait_gone(read, name, namespace, timeout=max(1.0, deadline - time.monotonic()), what=name)
        except WaitTimeout:
            raise CheckFailed(f"{name} still there {timeout:.0f}s after deleting pod {pod}: {events(subject, namespace, pod)[-3:]}") from None
