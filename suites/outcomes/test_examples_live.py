"""clusters/examples on a live Hopper-only bed: where each pod lands, and every reason against the scheduler's events."""

from __future__ import annotations

import hashlib
import json
import sys
import tempfile
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from fake_gpus.catalog import get_board
from fake_gpus.driver.faults import FAULTS_ENV
from hostenv.processes import run_child
from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver import DriverSpec
from testbed.clusters.kwok import KwokCluster
from testbed.clusters.layout import Layout, Mode, NodeSpec

from testbed.outcomes.manifests import ManifestError, load
from testbed.outcomes.render import summary
from testbed.outcomes.run import RunResult, run_manifests

from .conftest import EXAMPLES, HopperBed

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def examples(hopper_bed: HopperBed) -> RunResult:
    # keep=True: the objects stay so the tests can read the scheduler's own view of them
    return run_manifests(hopper_bed.api, load([EXAMPLES]), fleet="h100-only", minor=hopper_bed.minor, keep=True)


def _pod(result: RunResult, name: str):
    return next(p for p in result.pods if p.name == name)


def test_scheduling_settles_with_a_verdict_for_every_pod(examples: RunResult) -> None:
    assert examples.settled
    assert len(examples.pods) == 13  # 9 bare pods and 4 replicas
    assert {p.verdict for p in examples.pods} <= {"scheduled", "pending"}
    assert not examples.ok  # train-100gi cannot run on H100s and is not allowed to pend


def test_verdicts_nodes_and_devices_are_what_the_cluster_holds(examples: RunResult, hopper_bed: HopperBed) -> None:
    core, resource = client.CoreV1Api(hopper_bed.api), client.ResourceV1Api(hopper_bed.api)
    for outcome in examples.pods:
        # raw: the client's Pod model has no extendedResourceClaimStatus yet
        pod = json.loads(core.read_namespaced_pod(outcome.name, outcome.namespace, _preload_content=False).data)
        assert (outcome.verdict == "scheduled") == bool(pod["spec"].get("nodeName")), outcome.name
        assert outcome.node == pod["spec"].get("nodeName")
        allocated = set()
        names = [s["resourceClaimName"] for s in pod["status"].get("resourceClaimStatuses") or []]
        names += [c["resourceClaimName"] for c in pod["spec"].get("resourceClaims") or [] if c.get("resourceClaimName")]
        names += [pod["status"]["extendedResourceClaimStatus"]["resourceClaimName"]] if pod["status"].get("extendedResourceClaimStatus") else []
        for name in names:
            claim = resource.read_namespaced_resource_claim(name, outcome.namespace)
            allocated |= {(r.request, r.device, r.pool) for r in (claim.status.allocation.devices.results if claim.status.allocation else [])}
        assert {(a.request, a.device, a.node) for a in outcome.allocations} == allocated, outcome.name


def test_every_scheduler_reason_is_the_newest_failed_scheduling_event(examples: RunResult, hopper_bed: HopperBed) -> None:
    core = client.CoreV1Api(hopper_bed.api)
    pending = [p for p in examples.pods if p.verdict == "pending"]
    assert {p.name for p in pending} >= {"train-100gi", "too-big"}
    for outcome in pending:
        events = core.list_namespaced_event(outcome.namespace, field_selector=f"involvedObject.name={outcome.name},reason=FailedScheduling").items
        assert events, f"{outcome.name}: pending without a FailedScheduling event"
        newest = max(events, key=lambda e: (e.series.last_observed_time if e.series else None) or e.event_time or e.last_timestamp)
        assert outcome.scheduler == " ".join(newest.message.split())
        assert "cannot allocate all claims" in outcome.scheduler or "Insufficient" in outcome.scheduler


def test_memory_requests_name_the_selector_and_the_largest_gpu(examples: RunResult) -> None:
    for name, quantity in (("train-100gi", "100Gi"), ("too-big", "256Gi")):
        (reason,) = _pod(examples, name).reasons
        assert f"quantity('{quantity}')" in reason and "matches no gpu.nvidia.com device (16 on 2 nodes)" in reason
        h100 = get_board("h100-80gb").memory_mib / 1024
        assert f"; largest memory is {h100:.1f}Gi on h100-80gb" in reason, reason  # whole GPUs; dynamic-MIG ones offer less
    assert _pod(examples, "too-big").may_pend and _pod(examples, "too-big").ok
    assert _pod(examples, "train-70gi").verdict == "scheduled"


def test_mig_by_profile_and_first_available_take_1g_slices(examples: RunResult) -> None:
    for name, request in (("notebook-1g", "mig"), ("inference-smallest", "mig/small")):
        pod = _pod(examples, name)
        assert pod.node == "h100-mig" and pod.board == "h100-80gb"
        (allocation,) = pod.allocations
        assert (allocation.request, allocation.profile) == (request, "1g.10gb")


def test_shared_claim_gives_both_pods_one_gpu_and_replicas_one_each(examples: RunResult) -> None:
    producer, consumer = _pod(examples, "producer"), _pod(examples, "consumer")
    assert [a.device for a in producer.allocations] == [a.device for a in consumer.allocations]
    assert producer.node == consumer.node and producer.allocations[0].claim == "shared-gpu"
    replicas = [p for p in examples.pods if p.owner == "Deployment/serving"]
    assert len(replicas) == 4 and all(p.verdict == "scheduled" for p in replicas)
    held = [(p.node, a.device) for p in replicas for a in p.allocations]
    assert len(set(held)) == 4 and all(a.product and "H100" in a.product for p in replicas for a in p.allocations)


def test_a_cel_error_refuses_the_set_and_applies_nothing(hopper_bed: HopperBed) -> None:
    with pytest.raises(ManifestError) as refused:
        run_manifests(hopper_bed.api, load([EXAMPLES / "broken"]), fleet="h100-only", minor=hopper_bed.minor)
    message = str(refused.value)
    assert "line 1, column 49" in message and "productName = 'NVIDIA H100 80GB HBM3'" in message
    templates = client.ResourceV1Api(hopper_bed.api).list_resource_claim_template_for_all_namespaces().items
    assert "typo" not in {t.metadata.name for t in templates}
    assert "typo" not in {p.metadata.name for p in client.CoreV1Api(hopper_bed.api).list_pod_for_all_namespaces().items}


@pytest.mark.slow
def test_compare_shows_the_100gi_pod_scheduled_once_b200s_are_added(request) -> None:
    out = run_child([sys.executable, "-m", "testbed.cli", "try", str(EXAMPLES), "--fleet", "h100-only",
                     "--compare", "h100-b200-gb200", "--k8s", request.config.option.k8s, "-o", "json"],
                    capture_output=True, text=True, timeout=600)
    assert out.returncode == 1, out.stderr  # train-100gi stays pending on the Hopper fleet
    report = json.loads(out.stdout)
    rows = {r["pod"]: r for r in report["compare"]}
    moved = rows["train-100gi"]
    assert moved["change"] == "pending -> scheduled"
    assert moved["b"]["board"] in ("b200-180gb", "gb200-186gb")
    assert rows["too-big"]["change"] == ""  # 256Gi fits nowhere, before or after
    gib = {b: f"{get_board(b).memory_mib / 1024:.1f}".removesuffix(".0") + "Gi" for b in ("gb200-186gb", "b200-180gb", "h100-80gb")}
    wanted = f"largest memory is {gib['gb200-186gb']} on gb200-186gb (then {gib['b200-180gb']} on b200-180gb, {gib['h100-80gb']} on h100-80gb)"
    assert wanted in " ".join(rows["too-big"]["b"]["reasons"])  # the best of each board, once


def test_legacy_gpu_pods_are_served_through_dra_unchanged(examples: RunResult, hopper_bed: HopperBed) -> None:
    one = _pod(examples, "legacy-cuda")
    assert one.legacy == {"nvidia.com/gpu": "1"} and one.verdict == "scheduled"
    (allocation,) = one.allocations  # the claim the scheduler made for the extended resource
    assert allocation.claim.startswith("legacy-cuda-extended-resources-") and allocation.product == "NVIDIA H100 80GB HBM3"
    assert allocation.profile is None  # a whole GPU, as the device plugin gave
    assert "1 of 1 legacy (nvidia.com/gpu-style) pods run unchanged" in summary(examples)


def test_a_legacy_pod_asking_more_gpus_than_a_node_has_says_so(hopper_bed: HopperBed, tmp_path) -> None:
    # pinned to the whole-GPU node: nine of the partitionable node's devices make the allocator time out (10 s)
    (tmp_path / "nine.yaml").write_text(yaml.safe_dump({
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": "legacy-nine"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": "h100-whole"},
                 "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {"limits": {"nvidia.com/gpu": 9}}}]}}))
    result = run_manifests(hopper_bed.api, load([tmp_path]), fleet="h100-only", minor=hopper_bed.minor)
    (nine,) = result.pods
    assert nine.verdict == "pending" and not result.ok
    assert "cannot allocate all claims" in nine.scheduler and "node affinity/selector" in nine.scheduler
    assert nine.reasons == ["nvidia.com/gpu: 9 asked, DeviceClass gpu.nvidia.com has at most 8 devices on one node"]
    assert "0 of 1 legacy (nvidia.com/gpu-style) pods run unchanged" in summary(result)


def _attributes(hopper_bed: HopperBed) -> dict[tuple[str, str], dict]:
    """(node, device) -> attributes, straight from the published slices."""
    found = {}
    for item in client.ResourceV1Api(hopper_bed.api).list_resource_slice().items:
        for device in item.spec.devices or []:
            found[(item.spec.node_name, device.name)] = device.attributes or {}
    return found


def test_four_gpus_under_one_pcie_root_share_it_and_five_cannot(examples: RunResult, hopper_bed: HopperBed, tmp_path) -> None:
    pod = _pod(examples, "allreduce-4")
    assert pod.verdict == "scheduled" and len(pod.allocations) == 4
    published = _attributes(hopper_bed)
    roots = {published[(a.node, a.device)]["resource.kubernetes.io/pcieRoot"].string for a in pod.allocations}
    numa = {published[(a.node, a.device)]["resource.kubernetes.io/numaNode"].int for a in pod.allocations}
    assert len(roots) == 1 and len(numa) == 1, (roots, numa)
    node_roots = {v["resource.kubernetes.io/pcieRoot"].string for (n, _), v in published.items()
                  if n == pod.node and "resource.kubernetes.io/pcieRoot" in v}
    assert len(node_roots) == 2  # an 8-GPU board: two roots, so the constraint chose between them
    # five under one root: each root has four, so no node can; pinned to the whole-GPU node to keep it quick
    template = yaml.safe_load((EXAMPLES / "topology-one-pcie-root.yaml").read_text().split("---")[0])
    template["metadata"]["name"] = "five-one-root"
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 5
    pod5 = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "allreduce-5"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": "h100-whole"},
                     "containers": [{"name": "main", "image": "registry.invalid/trainer:1", "resources": {"claims": [{"name": "gpus"}]}}],
                     "resourceClaims": [{"name": "gpus", "resourceClaimTemplateName": "five-one-root"}]}}
    (tmp_path / "five.yaml").write_text(yaml.safe_dump_all([template, pod5]))
    (five,) = run_manifests(hopper_bed.api, load([tmp_path]), fleet="h100-only", minor=hopper_bed.minor).pods
    assert five.verdict == "pending" and "cannot allocate all claims" in five.scheduler
    assert five.reasons == ["every request matches devices, but no node has them all together with matchAttribute "
                            "resource.kubernetes.io/pcieRoot"]


def test_the_memory_checks_bite_when_the_driver_lies(request) -> None:
    """With the wrong-memory fault (whole GPUs publish twice their memory) the 100Gi pod runs on an H100 and
    the reason for 256Gi names the doubled memory: the checks above read what is published, not the catalog."""
    layout = Layout((NodeSpec("h100-whole", "h100-80gb", 2, Mode("whole")),), name="h100-lying")
    cluster = KwokCluster("dra-testbed-outcomes-fault")
    cluster.create(ClusterSpec(name=cluster.name, k8s=request.config.option.k8s, layout=layout,
                               driver=DriverSpec(env={FAULTS_ENV: "wrong-memory"})), force=True)
    api = cluster.api_client()
    try:
        result = run_manifests(api, load([EXAMPLES / "whole-gpu-by-memory.yaml", EXAMPLES / "cannot-schedule.yaml"]),
                               fleet="h100-lying")
    finally:
        api.close()
        cluster.delete()
    assert _pod(result, "train-100gi").verdict == "scheduled"  # test_memory_requests_... would fail here
    h100 = get_board("h100-80gb").memory_mib / 1024
    (reason,) = _pod(result, "too-big").reasons
    assert f"largest memory is {h100:.1f}Gi on h100-80gb" not in reason and f"{2 * h100:.1f}Gi" in reason


def test_the_run_leaves_no_discovery_cache_in_the_temp_dir(examples: RunResult, hopper_bed: HopperBed) -> None:
    """The kubernetes library's dynamic client writes /tmp/osrcp-<md5 of the server address>.json by default;
    it outlived every run, and a later cluster on the same loopback port would start from its discovery."""
    name = f"osrcp-{hashlib.md5(hopper_bed.api.configuration.host.encode(), usedforsecurity=False).hexdigest()}.json"
    assert examples.pods  # the run used the dynamic client (apply, settle, fleet)
    assert not (Path(tempfile.gettempdir()) / name).exists()
