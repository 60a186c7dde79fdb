"""An admin drains one GPU with a DeviceTaintRule (testbed/kube/device_taint_rules.py) on a KWOK bed of our driver,
with the real kube-scheduler and kube-controller-manager (its device-taint eviction controller):

- NoSchedule over the node's pool (a node drain): the Deployment's pod keeps running, a new claim waits although
  a GPU is free, and lands on it once the rule is deleted;
- NoExecute on the pod's GPU: the pod is evicted, the stand-in kubelet unprepares its claim, the claim is
  deallocated, the Deployment's replacement runs on the healthy GPU and the rule's status says the eviction is
  done; while the rule stands the drained GPU takes no claim; deleting the rule lets the waiting claim land on it.

DeviceTaintRules exist from 1.35 (alpha, gate DRADeviceTaintRules): the bed runs max(--k8s, 1.35). Timings (rule
to eviction, to unprepare, to the claim deallocated, to the replacement Running) are recorded as properties.
`DRA_TESTBED_TAINT_RULES_PROOF=no-eviction-controller|scheduler-ignores-taints` starts the bed with that half of
the large-fleet tuning (testbed/clusters/kwok/tuning.py) to show the test fails (docs/design/health.md)."""

from __future__ import annotations

import os
import sys
import time
import uuid

import pytest
from kubernetes import client

from hostenv.processes import run_child
from fake_gpus.driver.kubeletplugin.calllog import CALL_LOG_ENV, parse_calls
from testbed.clusters.driver import DriverSpec
from testbed.clusters.features import as_flag
from testbed.clusters.kwok.tuning import CONTROLLER_MANAGER_ARGS, SCHEDULER_GATES_OFF
from testbed.clusters.layout import from_flags
from testbed.cli.gpu_drain import rule_name
from testbed.kube.device_taint_rules import create_rule, delete_rule, get_rule, served_version
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.pytest.plugin import TestBed

pytestmark = [pytest.mark.cluster, pytest.mark.second_minor]

NODE = "evict-h100"
LOG = "calls.jsonl"
# 1.34 serves DeviceTaintRule too (v1alpha3, under DRADeviceTaints) and evicts the same, without the rule's status;
# the floor is the first minor with the rules' own gate and status (docs/design/health.md)
FIRST_MINOR_WITH_RULES = (1, 35)
FIRST_MINOR_WITH_RULE_STATUS = (1, 35)
PROOF_ENV = "DRA_TESTBED_TAINT_RULES_PROOF"
PROOF = os.environ.get(PROOF_ENV, "")
PENDING_LOOK_S = 5.0  # how long a claim must stay unallocated to count as kept off a tainted device
EVICTION_BOUND_S = 30.0  # the controller acts on the rule's watch event; later than this is a bug


def _cli(action: str, *args: str) -> str:
    """`dra-testbed gpu ACTION ARGS`: its output; the test fails with its error line when it exits non-zero."""
    run = run_child([sys.executable, "-m", "testbed.cli", "gpu", action, *args], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout


def _minor(request: pytest.FixtureRequest) -> str:
    asked = tuple(int(p) for p in request.config.option.k8s.split("."))
    return ".".join(map(str, max(asked, FIRST_MINOR_WITH_RULES)))


def _deployment(bed: TestBed, ns: str) -> None:
    bed.resource.create_namespaced_resource_claim_template(ns, {"metadata": {"name": "gpu"}, "spec": {"spec": {"devices": {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}}})
    labels = {"app": "trainer"}
    client.AppsV1Api(bed.api).create_namespaced_deployment(ns, {"metadata": {"name": "trainer"}, "spec": {
        "replicas": 1, "selector": {"matchLabels": labels}, "template": {"metadata": {"labels": labels}, "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE}, "terminationGracePeriodSeconds": 0,
            "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}],
            "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "gpu"}]}}}})


def _probe(bed: TestBed, ns: str, name: str) -> None:
    """A pod with a claim of its own on the node."""
    bed.resource.create_namespaced_resource_claim(ns, {"metadata": {"name": name}, "spec": {"devices": {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    bed.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": NODE}, "terminationGracePeriodSeconds": 0,
        "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}],
        "resourceClaims": [{"name": "g", "resourceClaimName": name}]}})


def _device(bed: TestBed, ns: str, claim: str) -> str | None:
    try:
        status = bed.resource.read_namespaced_resource_claim(claim, ns).status
    except Exception as error:  # the generated claim is deleted with its pod
        if getattr(error, "status", None) == 404:
            return None
        raise
    return status.allocation.devices.results[0].device if status and status.allocation else None


def _running_trainer(bed: TestBed, ns: str) -> tuple[str, str, str] | None:
    """(pod name, claim name, device) of the Deployment's pod once it runs with its claim allocated."""
    for pod in bed.core.list_namespaced_pod(ns, label_selector="app=trainer").items:
        statuses = pod.status.resource_claim_statuses or []
        if pod.metadata.deletion_timestamp is None and pod.status.phase == "Running" and statuses:
            claim = statuses[0].resource_claim_name
            device = _device(bed, ns, claim)
            if device:
                return pod.metadata.name, claim, device
    return None


def _pod_gone_or_going(bed: TestBed, ns: str, name: str) -> bool:
    pods = bed.core.list_namespaced_pod(ns, field_selector=f"metadata.name={name}").items
    return not pods or pods[0].metadata.deletion_timestamp is not None


def _unprepared(log, claim_uid: str) -> float | None:
    """When the plugin was asked to unprepare `claim_uid` (its monotonic clock, this host's), or None."""
    text = log.read_text() if log.exists() else ""
    return next((c.t for c in parse_calls(text) if c.method == "NodeUnprepareResources"
                 and any(uid == claim_uid for _, _, uid in c.claims)), None)


def _eviction_done(bed: TestBed, rule: str) -> bool:
    conditions = ((get_rule(bed.api, rule) or {}).get("status") or {}).get("conditions") or []
    return any(c["type"] == "EvictionInProgress" and c["status"] == "False" for c in conditions)


def _proof_patches(proof: str, gates: dict[str, bool]) -> dict[str, dict[str, dict[str, str]]]:
    """kwokctl component patches that break what PROOF names (the large-fleet tuning's two switches, one each)."""
    if proof == "no-eviction-controller":
        return {"kube-controller-manager": {"args": dict(CONTROLLER_MANAGER_ARGS)}}
    if proof == "scheduler-ignores-taints":  # the rules' gate goes with the taints' (it needs it to start)
        off = {g: False for g in (*SCHEDULER_GATES_OFF, "DRADeviceTaintRules")}
        return {"kube-scheduler": {"overrides": {"feature-gates": as_flag(dict(gates, **off))}}}
    raise ValueError(f"{PROOF_ENV}={proof!r}: valid are no-eviction-controller, scheduler-ignores-taints")


def test_admin_drains_a_gpu_with_device_taint_rules(bed, request, record_property, monkeypatch) -> None:
    from testbed.clusters.kwok import cluster as kwok_cluster
    from testbed.drivers.ours.kwok import plugin_dir

    if PROOF:
        monkeypatch.setattr(kwok_cluster, "component_patches", lambda _large, gates: _proof_patches(PROOF, gates))
    layout = from_flags([f"{NODE}=h100-80gb:2:whole"])
    fb_minor = _minor(request)
    with bed(layout, DriverSpec(env={CALL_LOG_ENV: LOG}), backend="kwok", label="health-evict", k8s=fb_minor) as fb:
        log = plugin_dir(fb.cluster.home, NODE) / LOG
        ns = f"evict-{uuid.uuid4().hex[:8]}"
        create_namespace(fb.core, ns)
        _deployment(fb, ns)
        pod, claim, held = until("the Deployment's pod Running on a GPU", lambda: _running_trainer(fb, ns), timeout=60)
        node_slice = fb.resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items[0].spec
        driver, pool = node_slice.driver, node_slice.pool.name
        other = "gpu-1" if held == "gpu-0" else "gpu-0"
        rule = f"drain-{uuid.uuid4().hex[:6]}"
        record_property("api_version", served_version(fb.api))
        try:
            # NoSchedule over the node's pool (a node drain): the running pod stays, a new claim waits although
            # one GPU is free; deleting the rule lets it land there
            # through the command an admin uses (testbed/cli/gpu_drain.py), which names its rule per node
            rule = rule_name(NODE, None)
            _cli("drain", "--name", fb.cluster.name, NODE, "--effect", "NoSchedule", "--driver-name", driver)
            _probe(fb, ns, "waiting")
            time.sleep(PENDING_LOOK_S)
            assert _device(fb, ns, "waiting") is None, "a claim was allocated on a node drained NoSchedule"
            assert _running_trainer(fb, ns) == (pod, claim, held), "a NoSchedule rule must not evict a running pod"
            began = time.monotonic()
            assert "undrained node" in _cli("undrain", "--name", fb.cluster.name, NODE, "--driver-name", driver)
            assert get_rule(fb.api, rule) is None
            rule = f"drain-{uuid.uuid4().hex[:6]}"
            assert until("the waiting claim on the free GPU", lambda: _device(fb, ns, "waiting"), timeout=30) == other
            record_property("node_undrain_to_allocation_s", round(time.monotonic() - began, 2))
            fb.core.delete_namespaced_pod("waiting", ns, grace_period_seconds=0)
            fb.resource.delete_namespaced_resource_claim("waiting", ns)
            until("the probe's claim gone", lambda: {c.metadata.name for c in fb.resource.list_namespaced_resource_claim(ns).items} == {claim})

            # NoExecute: evicted, unprepared, deallocated, replaced on the healthy GPU
            claim_uid = fb.resource.read_namespaced_resource_claim(claim, ns).metadata.uid
            began = time.monotonic()
            create_rule(fb.api, rule, driver, pool, held, effect="NoExecute")
            until("the pod evicted", lambda: _pod_gone_or_going(fb, ns, pod), timeout=EVICTION_BOUND_S, interval=0.05)
            record_property("rule_to_eviction_s", round(time.monotonic() - began, 2))
            unprepared = until("its claim unprepared", lambda: _unprepared(log, claim_uid), timeout=30, interval=0.1)
            record_property("rule_to_unprepare_s", round(unprepared - began, 2))
            until("its claim deallocated", lambda: _device(fb, ns, claim) is None, timeout=30, interval=0.1)
            record_property("rule_to_deallocated_s", round(time.monotonic() - began, 2))
            new_pod, _, new_device = until("the replacement Running", lambda: _running_trainer(fb, ns), timeout=60, interval=0.1)
            record_property("rule_to_replacement_running_s", round(time.monotonic() - began, 2))
            assert new_pod != pod and new_device == other, f"replacement {new_pod} on {new_device}, the drained GPU is {held}"
            if tuple(int(p) for p in fb_minor.split(".")) >= FIRST_MINOR_WITH_RULE_STATUS:  # the controller reports it on the rule
                until("the rule's eviction done", lambda: _eviction_done(fb, rule), timeout=30, interval=0.1)
                record_property("rule_to_status_done_s", round(time.monotonic() - began, 2))

            # while the rule stands the drained GPU takes nothing; deleting it lets the waiting claim land there
            _probe(fb, ns, "after")
            time.sleep(PENDING_LOOK_S)
            assert _device(fb, ns, "after") is None, "a claim was allocated on a device drained NoExecute"
            began = time.monotonic()
            assert delete_rule(fb.api, rule)
            assert until("the undrained GPU's claim", lambda: _device(fb, ns, "after"), timeout=30) == held
            record_property("undrain_to_allocation_s", round(time.monotonic() - began, 2))
        finally:
            delete_rule(fb.api, rule)
