"""Shared GPUs on kind: real kubelets prepare shared claims of our driver and of NVIDIA's on our fake H100s.

NVIDIA's consumable-shares demo (two replicas asking 4Gi of one GPU's memory) on a worker whose driver runs
with `--consumable-shares memory`: the scheduler puts both claims on one device as two shares, each kubelet
prepare succeeds, both containers run and see that one GPU through NVML, and deleting the pods unprepares
both. TimeSlicing (NVIDIA's `GpuConfig`), with both drivers: the worker's GPU gets long time slices while the pod
holds the claim and the default again once it is gone, as the node's NVML state says. NVIDIA's plugin runs with
its TimeSlicingSettings gate on (FEATURE_GATES in the driver's environment joins the gates its DaemonSets set).

Two kind beds of their own (one per driver, a few minutes each): `nox -s sharing` ($DRA_TESTBED_SHARING=full).
"""

from __future__ import annotations

import json
import os
import time
from typing import Iterator

import pytest

from fake_gpus.nvml.state import validate_state_dir
from suites.kind.pods import cdi_specs, delete_pod, gpu_pod, run_pod, scratch_namespace
from suites.kind_bed import KindBed
from suites.nvidia.conftest import required_plugin
from suites.nvidia.test_nvidia_prepare import _gpu_settings
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import from_flags
from testbed.drivers.nvidia.classes import DRIVER as NVIDIA_DRIVER

pytestmark = [pytest.mark.kind, pytest.mark.slow]

FULL_ENV = "DRA_TESTBED_SHARING"  # "full": these beds (nox -s sharing)
SHARED, SLICED = "share-mem", "slicing"
LAYOUT = [f"{SHARED}=h100-80gb:1:whole:shares=memory", f"{SLICED}=h100-80gb:1:whole"]
DEFAULT_SLICE, LONG_SLICE = 0, 3  # NVML's compute-policy time slices: default, long


@pytest.fixture(scope="module", params=["ours", "nvidia"])
def sharing_kind(bed, request) -> Iterator[KindBed]:
    """A kind bed of the module's own with the sharing worker, running the parameter's driver."""
    from testbed.clusters.kind.images.driver_image import ensure_workload_image

    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("shared GPUs on kind (two kind beds) run in `nox -s sharing` ($DRA_TESTBED_SHARING=full)")  # allowed in suites/skips.yaml
    # NVIDIA's plugin takes a GpuConfig's sharing settings only with its TimeSlicingSettings gate (off as it ships)
    driver = DriverSpec("nvidia", NVIDIA_DRIVER, path=str(required_plugin(request.config))).with_env(
        {"FEATURE_GATES": "TimeSlicingSettings=true"}) if request.param == "nvidia" else DriverSpec()
    workload = ensure_workload_image()
    try:
        with bed(from_flags(LAYOUT), driver, label=f"share-kind-{request.param}", backend="kind", images=(workload,),
                 workers_only=True, attempts=2, on_failure_logs=True) as tb:
            failed = request.session.testsfailed
            yield KindBed(tb.cluster, tb.api, workload)
            if request.session.testsfailed > failed:
                tb.handle.failed = True  # its logs are exported where they outlive the bed
    except ClusterError as exc:
        pytest.fail(f"kind bed for shared GPUs ({request.param}): {exc}", pytrace=False)


@pytest.fixture
def namespace(sharing_kind) -> Iterator[str]:
    yield from scratch_namespace(sharing_kind, "share")


def _claim_results(bed: KindBed, namespace: str) -> dict[str, dict]:
    """Each pod's allocation result, read raw (shareID and consumedCapacity as the API server returns them)."""
    out = bed.cluster.kubectl("-n", namespace, "get", "resourceclaims", "-o", "json")
    results = {}
    for claim in json.loads(out.stdout)["items"]:
        (result,) = claim["status"]["allocation"]["devices"]["results"]
        (user,) = claim["status"]["reservedFor"]
        results[user["name"]] = result
    return results


def _gpu_uuid(bed: KindBed, layout_node: str) -> str:
    gpus, _ = validate_state_dir(bed.state_dir(layout_node))
    (gpu,) = gpus
    return gpu.uuid


def test_two_memory_shares_run_on_one_gpu_and_both_containers_see_it(sharing_kind, namespace) -> None:
    bed = sharing_kind
    template = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "gpu-4gi"},
                "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
                    "deviceClassName": "gpu.nvidia.com", "capacity": {"requests": {"memory": "4Gi"}}}}]}}}}
    bed.resource.create_namespaced_resource_claim_template(namespace, template)
    seen = {name: run_pod(bed, namespace, gpu_pod(name, bed.workload_image, SHARED, "gpu-4gi")) for name in ("a", "b")}
    results = _claim_results(bed, namespace)
    uuid = _gpu_uuid(bed, SHARED)
    for name in ("a", "b"):
        delete_pod(bed, namespace, name, SHARED)
    assert all("error" not in s for s in seen.values()), seen
    assert results["a"]["device"] == results["b"]["device"], results  # one GPU, two claims
    assert results["a"].get("shareID") and results["a"].get("shareID") != results["b"].get("shareID"), results
    assert all(r.get("consumedCapacity") == {"memory": "4Gi"} for r in results.values()), results
    assert [[d["uuid"] for d in s["devices"]] for s in seen.values()] == [[uuid], [uuid]], seen


def test_time_slicing_sets_the_workers_gpu_while_the_pod_holds_its_claim(sharing_kind, namespace) -> None:
    bed = sharing_kind
    claim = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": "sliced"},
             "spec": {"devices": {
                 "requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}],
                 "config": [{"requests": ["gpu"], "opaque": {"driver": "gpu.nvidia.com", "parameters": {
                     "apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                     "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}}}]}}}
    bed.resource.create_namespaced_resource_claim(namespace, claim)
    pod = gpu_pod("sliced", bed.workload_image, SLICED, "unused")
    pod["spec"]["resourceClaims"] = [{"name": "gpu", "resourceClaimName": "sliced"}]
    uuid = _gpu_uuid(bed, SLICED)
    state = bed.state_dir(SLICED)
    before = _gpu_settings(state, uuid)
    seen = run_pod(bed, namespace, pod)
    held = _gpu_settings(state, uuid)
    delete_pod(bed, namespace, "sliced", SLICED)
    # delete_pod waits for the claims the pod's status names, which are the generated ones: this one it names not
    uid = bed.resource.read_namespaced_resource_claim("sliced", namespace).metadata.uid
    deadline = time.monotonic() + 120
    while any(uid in spec for spec in cdi_specs(bed, SLICED)) and time.monotonic() < deadline:
        time.sleep(0.5)
    after = _gpu_settings(state, uuid)
    assert "error" not in seen and [d["uuid"] for d in seen["devices"]] == [uuid], seen
    assert (before[1], held[1], after[1]) == (DEFAULT_SLICE, LONG_SLICE, DEFAULT_SLICE), (before, held, after)
