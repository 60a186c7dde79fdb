"""Fabric-attached GPUs on a KWOK bed ($DRA_TESTBED_FABRIC_ATTACH, fake_gpus/driver/fabric_attach.py): where the
scheduler serves device binding conditions (DRADeviceBindingConditions, on by default from 1.36) a pod's claim is
allocated at once but the pod is bound only after our controller set `dra-testbed.io/attached` (the attach
delay later); with the fault `binding-condition-never-set` it stays unbound while its claim stays allocated.
Where the gate is off (1.34, 1.35) the API server drops the fields: slices carry no binding conditions and the
pod binds without waiting."""

from __future__ import annotations

import json
import os
import time
import uuid

import pytest
from kubernetes import client

from conftest import driver_cluster
from driver_helpers import gpu_pod
from fake_gpus.driver.fabric_attach import ATTACH_ENV, ATTACHED, NEVER_SET
from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.kubeletplugin.device_status import READY
from fake_gpus.driver.slices import server_minor
from hostenv.versions import release_for
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster
# "full": both beds (`nox -s claim-status`); `nox -s tests` runs the unit tests (suites/driver/test_fabric_attach.py)
FULL_ENV = "DRA_TESTBED_FABRIC_ATTACH_LIVE"
DELAY = 6.0  # seconds the attach takes: long against the scheduler's reaction, short for a test
NODE = "fa-node"
NODE_SPEC = f"{NODE}=h100-80gb:1:whole"


def gate_on(bed: TestBed) -> bool:
    """Whether the bed's Kubernetes serves binding conditions by default (beta from 1.36)."""
    major, minor = server_minor(client.VersionApi(bed.api).get_code()).split(".")
    return (int(major), int(minor)) >= (1, 36)


def claims(bed: TestBed, ns: str) -> list[dict]:
    return json.loads(bed.resource.list_namespaced_resource_claim(ns, _preload_content=False).data)["items"]


def the_claim(bed: TestBed, ns: str) -> dict:
    items = claims(bed, ns)
    assert len(items) == 1, [c["metadata"]["name"] for c in items]
    return items[0]


def published_conditions(bed: TestBed) -> set[tuple[str, ...]]:
    """The binding conditions the node's published devices carry, as the API server stored them."""
    slices = json.loads(bed.resource.list_resource_slice(_preload_content=False).data)["items"]
    return {tuple(d.get("bindingConditions") or ()) for s in slices if s["spec"].get("nodeName") == NODE for d in s["spec"].get("devices") or []}


def bound(bed: TestBed, ns: str, pod: str) -> bool:
    return bool(bed.core.read_namespaced_pod(pod, ns).spec.node_name)


def allocated_then_bound(bed: TestBed, ns: str) -> tuple[float, float | None]:
    """A whole-GPU pod: seconds until its claim is allocated, and until the pod is bound (None: not within
    4 delays after the allocation)."""
    start = time.monotonic()
    pod = gpu_pod(bed, ns, NODE)
    until("the claim allocated", lambda: any((c.get("status") or {}).get("allocation") for c in claims(bed, ns)), timeout=60)
    allocated = time.monotonic() - start
    deadline = time.monotonic() + 4 * DELAY
    while time.monotonic() < deadline:
        if bound(bed, ns, pod):
            return allocated, time.monotonic() - start
        time.sleep(0.2)
    return allocated, None


def test_a_pod_binds_once_its_gpu_is_attached(bed) -> None:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip(f"fabric-attached GPUs on a live bed run in `nox -s claim-status` (${FULL_ENV}=full)")  # allowed in suites/skips.yaml
    with driver_cluster(bed, "attach", [NODE_SPEC], env={ATTACH_ENV: str(DELAY)}) as tb:
        ns = f"fa-{uuid.uuid4().hex[:6]}"
        create_namespace(tb.core, ns)
        allocated, bound_at = allocated_then_bound(tb, ns)
        assert bound_at is not None, "the pod was never bound"
        if gate_on(tb):
            assert published_conditions(tb) == {(ATTACHED,)}
            assert bound_at - allocated >= DELAY - 1.0, f"bound {bound_at - allocated:.1f}s after allocation: did not wait for the attach"
            # the stand-in kubelet prepares the bound pod: our plugin's Ready joins the controller's condition in the
            # same entry, neither apply taking the other's (claim_status.py: a field manager each)
            until("the plugin's Ready beside the attach", lambda: all(
                {ATTACHED, READY} <= {c["type"] for c in e["conditions"] if c["status"] == "True"}
                for e in the_claim(tb, ns)["status"].get("devices") or [{"conditions": []}]), timeout=60)
        else:  # the gate is off: the fields are dropped, nothing waits
            assert published_conditions(tb) == {()}
            assert bound_at - allocated < DELAY - 1.0, f"bound {bound_at - allocated:.1f}s after allocation although nothing waits"
        print(f"allocated after {allocated:.1f}s, bound after {bound_at:.1f}s (delay {DELAY}s, gate on: {gate_on(tb)})")


def test_a_pod_stays_unbound_when_the_attach_never_comes(bed, pytestconfig) -> None:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip(f"the faulty bed runs with ${FULL_ENV}=full")  # allowed in suites/skips.yaml
    if tuple(int(p) for p in release_for(pytestconfig.getoption("--k8s")).minor.split(".")) < (1, 36):
        pytest.skip("binding conditions are off by default before 1.36: nothing waits for the attach")  # allowed in suites/skips.yaml
    with driver_cluster(bed, "attach-fault", [NODE_SPEC], env={ATTACH_ENV: str(DELAY), **fault_env([NEVER_SET])}) as tb:
        ns = f"fa-{uuid.uuid4().hex[:6]}"
        create_namespace(tb.core, ns)
        allocated, bound_at = allocated_then_bound(tb, ns)
        assert bound_at is None, f"the pod was bound after {bound_at:.1f}s without the attach"
        assert (the_claim(tb, ns).get("status") or {}).get("allocation"), "the claim was unallocated before the binding timeout"
