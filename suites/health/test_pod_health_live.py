"""Resource health in pod status (KEP-4680) on a KWOK bed of our driver with health checks on: a pod Running
with a GPU from a ResourceClaimTemplate, `dra-testbed gpu fail --xid 79` on that GPU (another process) -> the
stand-in kubelet, following our plugin's health stream, writes the pod's allocatedResourcesStatus Unhealthy for
that device; `gpu heal` -> Healthy again. The field is served from 1.36 on (gate ResourceHealthStatus, beta and
on by default there): the bed is of 1.36 or the --k8s asked for, whichever is later.

`DRA_TESTBED_POD_HEALTH_PROOF=<fault switch>` (e.g. health-stream-always-healthy) runs it with that switch on in
the driver, to show it fails."""

from __future__ import annotations

import os
import time
import uuid

import pytest

from fake_gpus.driver.faults import fault_env
from testbed.cli.main import main as dra_testbed
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.kubelet.health import minor_with_field
from testbed.pytest.plugin import TestBed

from suites.driver.conftest import driver_cluster

pytestmark = [pytest.mark.cluster, pytest.mark.second_minor]  # a 1.36 bed: `nox -s health`, not `nox -s tests`

NODE = "podhealth-h100"
HEALTH_BOUND_S = 10.0  # monitor 0.2 s + plugin poll 0.2 s + stand-in round 1 s + API write: later than this is a bug
PROOF = os.environ.get("DRA_TESTBED_POD_HEALTH_PROOF", "")


def _pod(bed: TestBed, ns: str) -> None:
    bed.resource.create_namespaced_resource_claim_template(ns, {"metadata": {"name": "gpu"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    bed.core.create_namespaced_pod(ns, {"metadata": {"name": "trainer"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": NODE}, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "gpu", "request": "g"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": "gpu"}]}})


def _health(bed: TestBed, ns: str) -> dict | None:
    """The container's allocatedResourcesStatus as written (API names), None before any."""
    pod = bed.core.read_namespaced_pod("trainer", ns)
    statuses = pod.status.container_statuses or []
    found = bed.api.sanitize_for_serialization(statuses[0]).get("allocatedResourcesStatus") if statuses else None
    return found or None


def _device(bed: TestBed, ns: str) -> str:
    (claim,) = bed.resource.list_namespaced_resource_claim(ns).items
    return claim.status.allocation.devices.results[0].device


def _says(bed: TestBed, ns: str, health: str) -> bool:
    found = _health(bed, ns)
    return found is not None and [r["health"] for e in found for r in e["resources"]] == [health]


def test_pod_status_tells_the_health_of_its_gpu(bed, request, record_property) -> None:
    with driver_cluster(bed, "podhealth", [f"{NODE}=h100-80gb:2:whole:health"], env=fault_env([PROOF] if PROOF else []),
                        minor=minor_with_field(request.config.option.k8s)) as fb:
        ns = f"ph-{uuid.uuid4().hex[:8]}"
        create_namespace(fb.core, ns)
        _pod(fb, ns)
        until("the pod Running", lambda: fb.core.read_namespaced_pod("trainer", ns).status.phase == "Running", timeout=90)
        until("the pod's resource health written Healthy", lambda: _says(fb, ns, "Healthy"), timeout=30)
        device = _device(fb, ns)
        (entry,) = _health(fb, ns)
        # the kubelet's shape: the pod's claim name and the container's request; the device's first CDI id
        assert entry["name"] == "claim:gpu/g", entry
        (resource,) = entry["resources"]
        assert resource["resourceID"].startswith("k8s.gpu.nvidia.com/") and resource["resourceID"].endswith(device), resource

        began = time.monotonic()
        assert dra_testbed(["gpu", "fail", "--name", fb.name, NODE, device.removeprefix("gpu-"), "--xid", "79"]) == 0
        until(f"{device} Unhealthy in the pod's status after Xid 79", lambda: _says(fb, ns, "Unhealthy"), timeout=HEALTH_BOUND_S)
        record_property("xid_to_pod_status_s", time.monotonic() - began)

        began = time.monotonic()
        assert dra_testbed(["gpu", "heal", "--name", fb.name, NODE, device.removeprefix("gpu-")]) == 0
        until(f"{device} Healthy in the pod's status after its reset", lambda: _says(fb, ns, "Healthy"), timeout=HEALTH_BOUND_S)
        record_property("heal_to_pod_status_s", time.monotonic() - began)
