"""On KWOK a pod holding claims turns Running only once the stand-in kubelet has prepared them.

With our driver the node's kubelet plugin starts on the first such pod and the stand-in calls
NodePrepareResources; the pod then runs. With the plugin's `prepare-fails` switch the pod stays Pending
with the kubelet's FailedPrepareDynamicResources events, while a pod without claims on the same node
runs. The same fault on a bed with KWOK's own Stages (no gate) lets the claim pod run: the gate is what
the Pending check measures.
"""

from __future__ import annotations

import uuid

import pytest

from fake_gpus.driver.faults import fault_env
from testbed.clusters.kwok.stages import STAGES_ENV, StagesError, stages_yaml
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.daemon import FAILED_REASON
from testbed.kube.namespaces import create_namespace
from testbed.pytest.plugin import TestBed
from testbed.kube.waiting import until

from suites.driver.conftest import driver_cluster

pytestmark = pytest.mark.cluster

NODE = "gate-h100=h100-80gb:2:dynamic-mig"  # two GPUs: the claim's 1g.10gb on one, the legacy pod's GPU on the other




SMALL_MIG = {"deviceClassName": "mig.nvidia.com",
             "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]}


def _pods(bed: TestBed, node: str, request: dict | None = None) -> str:
    """A namespace with pod `claims` (one claim of `request`, default a 1g.10gb device), pod `plain` (none)
    and pod `legacy` (`nvidia.com/gpu: 1`: the scheduler's claim for it, DRAExtendedResource), all on `node`."""
    ns = f"g-{uuid.uuid4().hex[:8]}"
    create_namespace(bed.core, ns)
    bed.resource.create_namespaced_resource_claim_template(ns, {"metadata": {"name": "mig"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "r", "exactly": request or SMALL_MIG}]}}}})
    for name, claims in (("claims", True), ("plain", False)):
        container = {"name": "c", "image": "busybox", **({"resources": {"claims": [{"name": "g"}]}} if claims else {})}
        bed.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": node}, "containers": [container],
            **({"resourceClaims": [{"name": "g", "resourceClaimTemplateName": "mig"}]} if claims else {})}})
    bed.core.create_namespaced_pod(ns, {"metadata": {"name": "legacy"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node},
        "containers": [{"name": "c", "image": "busybox", "resources": {"limits": {"nvidia.com/gpu": "1"}}}]}})
    return ns


def _phase(bed: TestBed, ns: str, name: str) -> str:
    return bed.core.read_namespaced_pod(name, ns).status.phase


def _failures(bed: TestBed, ns: str, pod: str = "claims") -> list:
    events = bed.core.list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    return [e for e in events if e.reason == FAILED_REASON and e.type == "Warning"]


def test_a_prepared_pod_runs_and_a_pod_without_claims_is_unaffected(testbed: TestBed) -> None:
    node = testbed.layout.nodes[0].name
    ns = _pods(testbed, node, {"deviceClassName": "gpu.nvidia.com"})
    until("the pod without claims Running", lambda: _phase(testbed, ns, "plain") == "Running")
    until("the claim pod Running", lambda: _phase(testbed, ns, "claims") == "Running")
    until("the legacy pod Running", lambda: _phase(testbed, ns, "legacy") == "Running")
    for name in ("claims", "legacy"):
        pod = testbed.core.read_namespaced_pod(name, ns)
        assert (pod.metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true", f"{name} Running without the stand-in's prepare"
    assert not _failures(testbed, ns)
    assert (testbed.cluster.home / "plugins" / node / "plugin.log").is_file(), "our plugin was started on demand"


def test_a_failing_prepare_keeps_the_pod_pending_with_kubelet_events(bed) -> None:
    with driver_cluster(bed, "gate", [NODE], env=fault_env(["prepare-fails"])) as fb:
        ns = _pods(fb, "gate-h100")
        until("the pod without claims Running", lambda: _phase(fb, ns, "plain") == "Running")
        first = until("a FailedPrepareDynamicResources event", lambda: _failures(fb, ns))
        assert "prepare-fails" in first[0].message or "NodePrepareResources failed" in first[0].message, first[0].message
        until("a retry (a second event)", lambda: len(_failures(fb, ns)) >= 2)
        until("the legacy pod's claim (status.extendedResourceClaimStatus)",
              lambda: fb.core.read_namespaced_pod("legacy", ns).status.extended_resource_claim_status is not None)
        until("a retry (a second event) for the legacy pod", lambda: len(_failures(fb, ns, "legacy")) >= 2)
        for name in ("claims", "legacy"):
            assert _phase(fb, ns, name) == "Pending", name
            assert PREPARED_ANNOTATION not in (fb.core.read_namespaced_pod(name, ns).metadata.annotations or {}), name


def test_without_the_gate_the_failing_pod_would_run(bed, monkeypatch) -> None:
    """The check above can fail: with KWOK's own Stages the same failing prepare leaves the pod Running."""
    monkeypatch.setenv(STAGES_ENV, "kwok")
    with driver_cluster(bed, "ungated", [NODE], env=fault_env(["prepare-fails"])) as fb:
        ns = _pods(fb, "gate-h100")
        until("a FailedPrepareDynamicResources event", lambda: _failures(fb, ns))
        until("the claim pod Running although its prepare failed", lambda: _phase(fb, ns, "claims") == "Running")
        until("the legacy pod Running although its prepare failed", lambda: _phase(fb, ns, "legacy") == "Running")


def test_a_bad_stages_choice_is_one_line() -> None:
    with pytest.raises(StagesError, match=r"valid: gated, kwok"):
        stages_yaml("v0.8.0", {STAGES_ENV: "off"})
