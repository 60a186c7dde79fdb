"""Probe pods: one claim (from a template) per pod, applied and settled with the shared "apply, settle,
explain" module (testbed/outcomes: Applier, settle), then read back as the scheduler left them.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.conformance.subject import Subject
from testbed.outcomes.manifests import Applier, Manifest
from testbed.outcomes.settle import settle as settle_pods
from testbed.kube.waiting import WaitTimeout, wait_for

PAUSE_IMAGE = "registry.k8s.io/pause:3.10"
SETTLE_TIMEOUT = 60.0


def exactly(name: str, device_class: str, selector: str = "true", count: int | None = None, all_devices: bool = False) -> dict:
    """A request (or a firstAvailable subrequest) for `count` devices of `device_class` matching `selector`."""
    body: dict = {"deviceClassName": device_class, "selectors": [{"cel": {"expression": selector}}]}
    if all_devices:
        body["allocationMode"] = "All"
    elif count is not None:
        body["count"] = count
    return {"name": name, "exactly": body}


def first_available(name: str, *subrequests: dict) -> dict:
    """A request whose alternatives are tried in order."""
    return {"name": name, "firstAvailable": [{"name": s["name"], **s["exactly"]} for s in subrequests]}


@dataclass
class Probe:
    """A pod and its claim as the scheduler left them."""

    pod: str
    node: str | None
    unschedulable: bool
    results: list[dict]  # allocation results: request, driver, pool, device
    message: str = ""
    seconds: float = 0.0  # from applying the pod until the scheduler's decision was seen

    @property
    def scheduled(self) -> bool:
        return bool(self.node)

    def devices(self) -> list[tuple[str, str]]:
        return [(r["pool"], r["device"]) for r in self.results]

    def as_dict(self) -> dict:
        return {"pod": self.pod, "node": self.node, "unschedulable": self.unschedulable, "results": self.results,
                "message": self.message, "seconds": round(self.seconds, 3)}


def start(subject: Subject, namespace: str, requests: list[dict], node: str | None = None,
          constraints: list[dict] | None = None, config: list[dict] | None = None) -> str:
    """Apply a claim template (with `config`: the claim's device configuration) and a pod using it (pinned to
    `node` when given); returns the pod name."""
    suffix = uuid.uuid4().hex[:6]
    devices: dict = {"requests": requests}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": f"t-{suffix}"},
                "spec": {"spec": {"devices": devices}}}
    spec: dict = {"containers": [{"name": "main", "image": PAUSE_IMAGE, "resources": {"claims": [{"name": "gpu"}]}}],
                  "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"t-{suffix}"}],
                  "terminationGracePeriodSeconds": 0}
    if node:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"p-{suffix}"}, "spec": spec}
    Applier(subject.api, namespace).apply([Manifest(f"conformance probe {suffix}", template), Manifest(f"conformance probe {suffix}", pod)])
    return f"p-{suffix}"


def _unschedulable(pod) -> bool:
    """The scheduler tried and gave up for now: Unschedulable, or SchedulerError (e.g. an incomplete pool for All)."""
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason in ("Unschedulable", "SchedulerError")
               for c in (pod.status.conditions or []))


def observe(subject: Subject, namespace: str, pod_name: str) -> Probe:
    """The pod's node, whether it is unschedulable, and its claim's allocation, as they are now."""
    pod = subject.core.read_namespaced_pod(pod_name, namespace)
    message = next((c.message or "" for c in pod.status.conditions or [] if c.type == "PodScheduled" and c.status == "False"), "")
    results: list[dict] = []
    for status in pod.status.resource_claim_statuses or []:
        if not status.resource_claim_name:
            continue
        claim = subject.resource.read_namespaced_resource_claim(status.resource_claim_name, namespace)
        allocation = claim.status.allocation if claim.status else None
        for r in (allocation.devices.results if allocation else None) or []:
            results.append({"request": r.request, "driver": r.driver, "pool": r.pool, "device": r.device})
    return Probe(pod_name, pod.spec.node_name, _unschedulable(pod), results, message)


def settle(subject: Subject, namespace: str, pod_name: str, timeout: float = SETTLE_TIMEOUT) -> Probe:
    """Wait until the scheduler placed every pod of the namespace or refused it as it stands; the probe then."""
    pods = len(subject.core.list_namespaced_pod(namespace).items)
    snapshot = settle_pods(subject.api, [namespace], expected_pods=pods, timeout=timeout)
    if not snapshot.settled:
        raise WaitTimeout(f"pods of {namespace} not settled after {timeout:.0f}s: {[p['metadata']['name'] for p in snapshot.undecided()]}")
    if subject.core.read_namespaced_pod(pod_name, namespace).spec.node_name:
        # the allocation is written before the binding; the claim status is there once the pod is bound
        wait_for(subject.core.list_namespaced_pod, lambda p: bool(p.status.resource_claim_statuses),
                 namespace=namespace, name=pod_name, timeout=timeout, what=f"pod {pod_name} claim status")
    return observe(subject, namespace, pod_name)


def run(subject: Subject, namespace: str, requests: list[dict], node: str | None = None,
        constraints: list[dict] | None = None, config: list[dict] | None = None) -> Probe:
    """start + settle, timed."""
    began = time.monotonic()
    probe = settle(subject, namespace, start(subject, namespace, requests, node, constraints, config))
    probe.seconds = time.monotonic() - began
    return probe


def wait_any_scheduled(subject: Subject, namespace: str, pods: list[str], timeout: float = 30.0) -> Probe | None:
    """The probe of the first of `pods` to be scheduled (seconds: since this call), or None when none is
    after `timeout` seconds."""
    began = time.monotonic()
    try:
        pod = wait_for(subject.core.list_namespaced_pod, lambda p: p.metadata.name in pods and bool(p.spec.node_name),
                       namespace=namespace, timeout=timeout, what=f"one of {pods} scheduled")
    except AssertionError:
        return None
    probe = settle(subject, namespace, pod.metadata.name)
    probe.seconds = time.monotonic() - began
    return probe


def delete(subject: Subject, namespace: str, pod_name: str, timeout: float = 60.0) -> None:
    """Delete the pod and wait until its generated claim is gone (its devices are free again)."""
    pod = subject.core.read_namespaced_pod(pod_name, namespace)
    claims = [s.resource_claim_name for s in pod.status.resource_claim_statuses or [] if s.resource_claim_name]
    subject.core.delete_namespaced_pod(pod_name, namespace, body=client.V1DeleteOptions(grace_period_seconds=0))
    from testbed.kube.waiting import wait_gone

    wait_gone(subject.core.read_namespaced_pod, pod_name, namespace, timeout=timeout, what=f"pod {pod_name} deleted")
    for claim in claims:
        try:
            wait_gone(subject.resource.read_namespaced_resource_claim, claim, namespace, timeout=timeout, what=f"claim {claim} released")
        except ApiException as exc:
            if exc.status != 404:
                raise
