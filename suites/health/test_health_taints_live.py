"""Failed GPUs on a KWOK bed of our driver with health checks on: `dra-testbed gpu fail` (another process
than the driver) -> the device's taint in the node's ResourceSlice within a bound, the real kube-scheduler
keeps new claims off it while a running pod stays, `gpu heal` lifts it and the device takes claims again
(a lost GPU once it answers again, a fatal Xid once NVML's recovery action says the GPU was reset);
an application Xid taints with effect None only.

`DRA_TESTBED_HEALTH_PROOF=<fault switch>` runs the same test with that switch on in the driver, to show
it fails (see docs/design/health.md)."""

from __future__ import annotations

import os
import time
import uuid

import pytest
from kubernetes import client

from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.slices import api_limits, server_minor
from testbed.cli.main import main as dra_testbed
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.pytest.plugin import TestBed

from suites.driver.conftest import driver_cluster

pytestmark = pytest.mark.cluster

NODE = "health-h100"
TAINT_BOUND_S = 10.0  # publisher poll 1 s + monitor wait 0.2 s + API write: a taint later than this is a bug
PENDING_LOOK_S = 5.0  # how long a claim must stay unallocated to count as kept off a tainted device
PROOF = os.environ.get("DRA_TESTBED_HEALTH_PROOF", "")
XID, LOST = "gpu.nvidia.com/xid", "gpu.nvidia.com/gpu-lost"


def _taints(bed: TestBed) -> dict[str, list[dict]]:
    """Device name -> its taints (without timeAdded), over the node's slices of our driver."""
    slices = bed.resource.list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
    found = {}
    for s in slices:
        for d in s.spec.devices or ():
            found[d.name] = [{k: v for k, v in {"key": t.key, "value": t.value, "effect": t.effect}.items() if v is not None}
                             for t in d.taints or ()]
    return found


def _gpu(bed: TestBed, action: str, gpu: str, *flags: str) -> None:
    assert dra_testbed(["gpu", action, "--name", bed.name, NODE, gpu, *flags]) == 0


def _pod(bed: TestBed, ns: str, name: str) -> None:
    bed.resource.create_namespaced_resource_claim(ns, {"metadata": {"name": name}, "spec": {"devices": {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]}}})
    bed.core.create_namespaced_pod(ns, {"metadata": {"name": name}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": NODE},
        "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}],
        "resourceClaims": [{"name": "g", "resourceClaimName": name}]}})


def _device(bed: TestBed, ns: str, claim: str) -> str | None:
    status = bed.resource.read_namespaced_resource_claim(claim, ns).status
    return status.allocation.devices.results[0].device if status and status.allocation else None


def _running(bed: TestBed, ns: str, pod: str) -> bool:
    return bed.core.read_namespaced_pod(pod, ns).status.phase == "Running"


def _taint_appears(bed: TestBed, device: str, taint: dict) -> float:
    began = time.monotonic()
    until(f"taint {taint} on {device}", lambda: taint in _taints(bed).get(device, []), timeout=TAINT_BOUND_S, interval=0.05)
    return time.monotonic() - began


def test_failed_gpu_is_tainted_avoided_and_back_after_heal(bed, record_property) -> None:
    with driver_cluster(bed, "health", [f"{NODE}=h100-80gb:2:whole:health"], env=fault_env([PROOF] if PROOF else [])) as fb:
        until("the node's slices", lambda: set(_taints(fb)) == {"gpu-0", "gpu-1"})
        assert _taints(fb) == {"gpu-0": [], "gpu-1": []}
        ns = f"h-{uuid.uuid4().hex[:8]}"
        create_namespace(fb.core, ns)
        _pod(fb, ns, "first")
        held = until("the first claim allocated", lambda: _device(fb, ns, "first"))
        until("the first pod Running", lambda: _running(fb, ns, "first"))
        free = "gpu-1" if held == "gpu-0" else "gpu-0"

        # a lost GPU taints every device of the node (NVIDIA's rule); the running pod stays
        _gpu(fb, "fail", free.removeprefix("gpu-"), "--lost")
        record_property("lost_to_taint_s", _taint_appears(fb, free, {"key": LOST, "effect": "NoSchedule"}))
        assert {"key": LOST, "effect": "NoSchedule"} in _taints(fb)[held]
        _pod(fb, ns, "second")
        time.sleep(PENDING_LOOK_S)
        assert _device(fb, ns, "second") is None, "a claim was allocated on a device tainted NoSchedule"
        assert _running(fb, ns, "first"), "a NoSchedule taint must not evict a running pod"

        # heal: the taint goes and the waiting claim lands on the healed GPU
        began = time.monotonic()
        _gpu(fb, "heal", free.removeprefix("gpu-"))
        assert until("the healed GPU's claim", lambda: _device(fb, ns, "second"), timeout=30) == free
        record_property("heal_to_allocation_s", time.monotonic() - began)
        assert _taints(fb) == {"gpu-0": [], "gpu-1": []}

        # a fatal Xid on the held GPU: NoSchedule, its pod still runs; an application Xid on the other: None
        _gpu(fb, "fail", held.removeprefix("gpu-"), "--xid", "79")
        record_property("xid_to_taint_s", _taint_appears(fb, held, {"key": XID, "value": "79", "effect": "NoSchedule"}))
        _gpu(fb, "fail", free.removeprefix("gpu-"), "--xid", "13")
        if api_limits(server_minor(client.VersionApi(fb.api).get_code())).taint_effect_none:
            _taint_appears(fb, free, {"key": XID, "value": "13", "effect": "None"})
        else:  # 1.34 refuses effect None: the taint is left out and the slice still published
            time.sleep(PENDING_LOOK_S / 2)
            assert _taints(fb)[free] == [] and _taints(fb)[held] == [{"key": XID, "value": "79", "effect": "NoSchedule"}]
        assert _running(fb, ns, "first")
        for name in ("first", "second"):
            fb.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
            fb.resource.delete_namespaced_resource_claim(name, ns)
        until("both claims gone", lambda: not fb.resource.list_namespaced_resource_claim(ns).items)
        # an application Xid (effect None) leaves its GPU schedulable; a fatal one keeps claims off
        _pod(fb, ns, "third")
        assert until("the third claim allocated", lambda: _device(fb, ns, "third")) == free
        _pod(fb, ns, "fourth")
        time.sleep(PENDING_LOOK_S)
        assert _device(fb, ns, "fourth") is None, "a claim was allocated on the GPU with a fatal Xid"

        # heal resets the GPU: NVML's recovery action for it (pending since the Xid) is back to none, our
        # driver lifts its Xid taint and the waiting claim lands on it
        began = time.monotonic()
        _gpu(fb, "heal", held.removeprefix("gpu-"))
        assert until("the reset GPU's claim", lambda: _device(fb, ns, "fourth"), timeout=30) == held
        record_property("reset_to_allocation_s", time.monotonic() - began)
        assert _taints(fb)[held] == []
