"""A gang job: N pods in one PodGroup (gang minCount N), each with its own device claim, spread over nodes.

Kubernetes 1.37 schedules such a group all or none: the scheduler reserves each pod's devices in memory only
and admits the pods (Permit) once all N fit; with one device too few it marks every pod unschedulable, binds
none and writes no allocation. `observe` reads what the API says: which pods are bound, which claims allocated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping

from kubernetes import client

from testbed.kube.podgroups import create_podgroup, gang_podgroup
from testbed.kube.waiting import WaitTimeout, wait_for_all


@dataclass(frozen=True)
class GangJob:
    """`size` pods, each claiming one device of `device_class` matching CEL `selector`, on `nodes` only; with
    `group_claim`, one claim of the PodGroup that every pod shares instead (DRAWorkloadResourceClaims)."""

    name: str
    size: int
    device_class: str
    selector: str
    nodes: tuple[str, ...]
    group_claim: bool = False


@dataclass(frozen=True)
class GangOutcome:
    bound: dict[str, str]  # pod -> node
    unschedulable: dict[str, str]  # pod -> why, for pods the scheduler marked PodScheduled=False
    allocated_claims: frozenset[str]  # of the job's namespace
    pods: int

    @property
    def all_bound(self) -> bool:
        return len(self.bound) == self.pods


def pod_name(job: GangJob, index: int) -> str:
    return f"{job.name}-{index}"


def _pod(job: GangJob, index: int, template: str) -> dict:
    # spec.schedulingGroup is unknown to the Python client's models: the body goes to the server as written
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": pod_name(job, index), "labels": {"gang": job.name}},
        "spec": {
            "schedulingGroup": {"podGroupName": job.name},
            "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "kubernetes.io/hostname", "operator": "In", "values": list(job.nodes)}]}]}}},
            "containers": [{"name": "main", "image": "registry.invalid/none:0", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def submit(api: client.ApiClient, namespace: str, job: GangJob) -> None:
    """The PodGroup, one claim template, then the pods (the group exists before any pod names it)."""
    template = f"{job.name}-gpu"
    # a pod's claim that equals one of its PodGroup's (name and template) is the group's one generated claim
    shared = [{"name": "gpu", "resourceClaimTemplateName": template}] if job.group_claim else None
    create_podgroup(api, namespace, gang_podgroup(job.name, job.size, shared))
    client.ResourceV1Api(api).create_namespaced_resource_claim_template(namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": template},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": job.device_class, "selectors": [{"cel": {"expression": job.selector}}]}}]}}}})
    core = client.CoreV1Api(api)
    for index in range(job.size):
        core.create_namespaced_pod(namespace, _pod(job, index, template))


def _unschedulable(pod) -> str | None:
    """Why the scheduler marked `pod` PodScheduled=False; None while it has not."""
    return next((c.message or c.reason or "" for c in (pod.status.conditions or [])
                 if c.type == "PodScheduled" and c.status == "False"), None)


def observe(api: client.ApiClient, namespace: str, job: GangJob) -> GangOutcome:
    pods = client.CoreV1Api(api).list_namespaced_pod(namespace, label_selector=f"gang={job.name}").items
    bound = {p.metadata.name: p.spec.node_name for p in pods if p.spec.node_name}
    unschedulable = {p.metadata.name: why for p in pods if (why := _unschedulable(p)) is not None}
    claims = client.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items  # a namespace per job
    allocated = frozenset(c.metadata.name for c in claims if c.status and c.status.allocation)
    return GangOutcome(bound, unschedulable, allocated, job.size)


def wait_outcome(api: client.ApiClient, namespace: str, job: GangJob, timeout: float) -> GangOutcome:
    """The outcome once settled (all bound, or all unschedulable), else as it stands after `timeout`: a gang
    short of devices may wait at Permit without any pod being marked."""
    def settled(pods: Mapping[str, Any]) -> bool:
        return len(pods) == job.size and (all(p.spec.node_name for p in pods.values())
                                          or all(_unschedulable(p) is not None for p in pods.values()))

    try:
        wait_for_all(client.CoreV1Api(api).list_namespaced_pod, settled, namespace=namespace,
                     label_selector=f"gang={job.name}", timeout=timeout, what=f"gang {job.name} settled")
    except WaitTimeout:
        pass  # unsettled is an outcome too: the caller judges it
    return observe(api, namespace, job)
