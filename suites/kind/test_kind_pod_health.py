"""Resource health in pod status (KEP-4680) on kind: the real kubelet (gate ResourceHealthStatus, beta and on by
default from 1.36) follows our plugin's health stream and writes `allocatedResourcesStatus` of a running pod's
container: Healthy, Unhealthy after `dra-testbed gpu fail --xid 79` on its GPU, Healthy again after `gpu heal`.

A kind bed of its own, of 1.36 or the --k8s asked for, whichever is later (minutes): `nox -s health`
($DRA_TESTBED_NVIDIA_HEALTH=full), not `nox -s tests`; suites/health/test_pod_health_live.py is its KWOK twin.
`DRA_TESTBED_POD_HEALTH_PROOF=<fault switch>` (e.g. health-stream-always-healthy) runs it with that switch on in
our driver, to show it fails.
"""

from __future__ import annotations

import os
import uuid
from typing import Iterator

import pytest

from fake_gpus.driver.faults import fault_env
from suites.kind.pods import allocated_device, claim_template, gpu_pod
from suites.kind.test_kind_health_taints import _gpu, _until  # the same injection and wait as the taints' kind test
from suites.kind_bed import KindBed
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec
from testbed.clusters.kind.images.driver_image import ensure_workload_image
from testbed.clusters.layout import from_flags
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import wait_for
from testbed.kubelet.health import minor_with_field

pytestmark = [pytest.mark.kind, pytest.mark.slow]

FULL_ENV = "DRA_TESTBED_NVIDIA_HEALTH"
NODE = "sickpod"
PROOF = os.environ.get("DRA_TESTBED_POD_HEALTH_PROOF", "")


@pytest.fixture(scope="module")
def pod_health_kind(bed, request) -> Iterator[KindBed]:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("pod resource health on kind (a kind bed of its own) runs in `nox -s health` ($DRA_TESTBED_NVIDIA_HEALTH=full)")  # allowed in suites/skips.yaml
    minor = minor_with_field(request.config.option.k8s)
    workload = ensure_workload_image()
    try:
        with bed(from_flags([f"{NODE}=h100-80gb:2:whole:health"]), DriverSpec(env=fault_env([PROOF] if PROOF else [])), label="pod-health-kind", backend="kind", k8s=minor,
                 images=(workload,), workers_only=True, attempts=2, on_failure_logs=True) as tb:
            failed = request.session.testsfailed
            yield KindBed(tb.cluster, tb.api, workload)
            if request.session.testsfailed > failed:
                tb.handle.failed = True
    except ClusterError as exc:
        pytest.fail(f"kind bed for pod resource health: {exc}", pytrace=False)


def _health(bed: KindBed, ns: str) -> list[str]:
    pod = bed.core.read_namespaced_pod("trainer", ns)
    statuses = pod.status.container_statuses or []
    found = bed.api.sanitize_for_serialization(statuses[0]).get("allocatedResourcesStatus") if statuses else None
    return [r["health"] for e in found or () for r in e["resources"]]


def test_the_kubelet_writes_the_health_of_a_pods_gpu(pod_health_kind, record_property) -> None:
    bed = pod_health_kind
    ns = f"ph-{uuid.uuid4().hex[:8]}"
    create_namespace(bed.core, ns)
    bed.resource.create_namespaced_resource_claim_template(ns, claim_template("gpu", "gpu.nvidia.com", "true"))
    bed.core.create_namespaced_pod(ns, gpu_pod("trainer", bed.workload_image, NODE, "gpu"))
    wait_for(bed.core.list_namespaced_pod, lambda p: p.status.phase == "Running", name="trainer", namespace=ns,
             what="pod trainer to run", timeout=180)
    _until("the kubelet's first health of the pod's GPU", lambda: _health(bed, ns) == ["Healthy"], bound=60)
    entry = bed.api.sanitize_for_serialization(bed.core.read_namespaced_pod("trainer", ns).status.container_statuses[0])
    record_property("written", str(entry.get("allocatedResourcesStatus")))
    device = allocated_device(bed, ns, "trainer")
    _gpu(bed, "fail", NODE, device.removeprefix("gpu-"), "--xid", "79")
    record_property("xid_to_pod_status_s", round(_until("Unhealthy after Xid 79", lambda: _health(bed, ns) == ["Unhealthy"]), 2))
    _gpu(bed, "heal", NODE, device.removeprefix("gpu-"))
    record_property("heal_to_pod_status_s", round(_until("Healthy after the reset", lambda: _health(bed, ns) == ["Healthy"]), 2))
