"""Kueue, built from its own Go module and run as a host process (testbed.addons.kueue), queues Jobs whose pods
claim GPUs through a ResourceClaimTemplate on a KWOK bed of our driver: with quota for one GPU (its DRA support
counting claims of the gpu.nvidia.com class), it admits one Job, whose pod the real scheduler places on a fake
GPU node with its claim allocated, and holds the second back for quota until the first is gone, although the
fleet has GPUs to spare.

Building Kueue takes minutes cold: the suite runs in `nox -s kueue` ($DRA_TESTBED_KUEUE=full)."""

from __future__ import annotations

import os
import uuid
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from fake_gpus.driver.identity import current_identity
from testbed.addons import kueue
from testbed.clusters.layout import load_layout
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.pytest.plugin import BedFactory, TestBed

pytestmark = pytest.mark.cluster

FULL_ENV = "DRA_TESTBED_KUEUE"
LAYOUT = Path(__file__).resolve().parents[2] / "clusters" / "layouts" / "h100-only.yaml"
GROUP, VERSION = kueue.API.split("/")
QUEUE_LABEL = "kueue.x-k8s.io/queue-name"


@pytest.fixture(scope="module")
def kueue_bed(bed: BedFactory) -> Iterator[TestBed]:
    """A KWOK bed of our driver (16 fake H100s) with Kueue's manager running against it."""
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip(f"Kueue (a build of minutes cold) runs in `nox -s kueue` (${FULL_ENV}=full)")  # allowed in suites/skips.yaml
    with bed(load_layout(LAYOUT), label="kueue") as tb:
        assert tb.cluster is not None
        with kueue.running(tb.api, tb.kubeconfig, tb.cluster.home / "kueue"):
            yield tb


def _custom(tb: TestBed) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(tb.api)


def gpu_queue(tb: TestBed, namespace: str, gpus: int) -> str:
    """A ClusterQueue with quota for `gpus` GPUs (Kueue's resource for the gpu class) and a LocalQueue on it in
    `namespace`; returns the LocalQueue's name."""
    name = f"kueue-{uuid.uuid4().hex[:6]}"
    custom = _custom(tb)
    custom.create_cluster_custom_object(GROUP, VERSION, "resourceflavors", {
        "apiVersion": kueue.API, "kind": "ResourceFlavor", "metadata": {"name": name}})
    custom.create_cluster_custom_object(GROUP, VERSION, "clusterqueues", {
        "apiVersion": kueue.API, "kind": "ClusterQueue", "metadata": {"name": name},
        "spec": {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}},
                 "resourceGroups": [{"coveredResources": [kueue.GPU_RESOURCE], "flavors": [
                     {"name": name, "resources": [{"name": kueue.GPU_RESOURCE, "nominalQuota": gpus}]}]}]}})
    custom.create_namespaced_custom_object(GROUP, VERSION, namespace, "localqueues", {
        "apiVersion": kueue.API, "kind": "LocalQueue", "metadata": {"name": name}, "spec": {"clusterQueue": name}})
    return name


def one_gpu_template(tb: TestBed, namespace: str) -> str:
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
            "spec": {"spec": {"devices": {"requests": [
                {"name": "gpu", "exactly": {"deviceClassName": current_identity().gpu_class, "count": 1}}]}}}}
    tb.resource.create_namespaced_resource_claim_template(namespace, body)
    return "one-gpu"


def queued_job(tb: TestBed, namespace: str, name: str, queue: str, template: str) -> None:
    """A Job of one pod claiming one GPU, created suspended with the queue label: what Kueue's job webhook (not
    registered on this bed) would make of it; Kueue unsuspends it once admitted."""
    pod = {"restartPolicy": "Never",
           "containers": [{"name": "main", "image": "registry.invalid/none:0", "resources": {"claims": [{"name": "gpu"}]}}],
           "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}]}
    body = {"apiVersion": "batch/v1", "kind": "Job", "metadata": {"name": name, "labels": {QUEUE_LABEL: queue}},
            "spec": {"suspend": True, "parallelism": 1, "completions": 1, "backoffLimit": 0,
                     "template": {"spec": pod}}}
    client.BatchV1Api(tb.api).create_namespaced_job(namespace, body)


def workload_of(tb: TestBed, namespace: str, job: str) -> dict | None:
    """The Workload Kueue made for `job` (its owner), None before it exists."""
    items = _custom(tb).list_namespaced_custom_object(GROUP, VERSION, namespace, "workloads")["items"]
    return next((w for w in items if any(o["kind"] == "Job" and o["name"] == job
                                         for o in w["metadata"].get("ownerReferences", []))), None)


def condition(workload: dict, kind: str) -> dict | None:
    return next((c for c in workload.get("status", {}).get("conditions", []) if c["type"] == kind), None)


def admitted(workload: dict | None) -> bool:
    return bool(workload) and (condition(workload, "Admitted") or {}).get("status") == "True"


def gpu_usage(workload: dict) -> str | None:
    """The quota of Kueue's GPU resource the admission charged to the workload's one pod set."""
    assignments = workload["status"]["admission"]["podSetAssignments"]
    return assignments[0].get("resourceUsage", {}).get(kueue.GPU_RESOURCE)


def running_pod(tb: TestBed, namespace: str, job: str):
    """The job's pod once the scheduler has placed it and its claim is allocated; the pod and its claim."""
    def placed():
        pods = tb.core.list_namespaced_pod(namespace, label_selector=f"job-name={job}").items
        if not pods or not pods[0].spec.node_name or not pods[0].status.resource_claim_statuses:
            return None
        claim = tb.resource.read_namespaced_resource_claim(pods[0].status.resource_claim_statuses[0].resource_claim_name,
                                                           namespace)
        return (pods[0], claim) if claim.status and claim.status.allocation else None
    return until(f"job {job}'s pod scheduled with its claim allocated", placed, timeout=90)


def test_kueue_admits_one_gpu_job_and_holds_the_second_for_quota(kueue_bed: TestBed) -> None:
    tb = kueue_bed
    namespace = f"kueue-{uuid.uuid4().hex[:8]}"
    create_namespace(tb.core, namespace, {"dra-testbed.io/test": "true"})
    queue = gpu_queue(tb, namespace, gpus=1)
    template = one_gpu_template(tb, namespace)

    queued_job(tb, namespace, "first", queue, template)
    first = until("Kueue to admit the first job", lambda: (w := workload_of(tb, namespace, "first")) and admitted(w) and w,
                  timeout=60)
    assert gpu_usage(first) == "1", first["status"]["admission"]  # the claim counted through deviceClassMappings
    pod, claim = running_pod(tb, namespace, "first")
    nodes = {n.metadata.name for n in tb.core.list_node().items}
    assert pod.spec.node_name in nodes and claim.status.allocation.devices.results[0].driver == current_identity().driver

    queued_job(tb, namespace, "second", queue, template)
    held = until("Kueue to judge the second job", lambda: (w := workload_of(tb, namespace, "second"))
                 and condition(w, "QuotaReserved") and w, timeout=60)
    reserved = condition(held, "QuotaReserved")
    assert reserved["status"] == "False" and kueue.GPU_RESOURCE in reserved["message"] and "quota" in reserved["message"], reserved
    assert not admitted(held)
    assert client.BatchV1Api(tb.api).read_namespaced_job("second", namespace).spec.suspend is True
    assert not tb.core.list_namespaced_pod(namespace, label_selector="job-name=second").items

    client.BatchV1Api(tb.api).delete_namespaced_job("first", namespace, propagation_policy="Background")
    until("Kueue to admit the second job once the first is gone",
          lambda: admitted(workload_of(tb, namespace, "second")), timeout=90)
    second_pod, second_claim = running_pod(tb, namespace, "second")
    assert second_claim.status.allocation.devices.results[0].driver == current_identity().driver
