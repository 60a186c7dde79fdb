"""A claim our kubelet plugin prepared reports its devices in status.devices (KEP-4817): one entry per allocated
device with a Ready condition and the UUID of the GPU or MIG device that backs it, as the node's NVML state
holds them. With the fault switch `device-status-missing` the same check fails (it can bite).

The stand-in kubelet of a KWOK bed prepares the pod's claim through our plugin; --k8s picks the minor (the
field is beta and on by default from 1.33, GA in 1.37)."""

from __future__ import annotations

import json
import os
import uuid

import pytest

from conftest import driver_cluster
from driver_helpers import IDENTITY, attr, start_pod
from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.identity import parse_device_name
from fake_gpus.driver.kubeletplugin.device_status import DEVICE_STATUS_MISSING, READY
from fake_gpus.nvml.state import validate_state_dir
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster
# "full": the bed with the fault switch too (a second bed); the default run checks the clean bed only
FULL_ENV = "DRA_TESTBED_DEVICE_STATUS_LIVE"

NODE = "ds-node"
NODE_SPEC = f"{NODE}=h100-80gb:2:dynamic-mig"


class StatusMismatch(AssertionError):
    """The claim's status.devices does not describe what the plugin prepared."""


def prepared_claim(bed: TestBed, ns: str) -> dict:
    """A pod holding one claim for a whole GPU and a 1g.10gb MIG device, once the stand-in kubelet prepared it;
    the claim as the API server has it."""
    pod = start_pod(bed, ns, NODE, [(IDENTITY.gpu_class, "true"), (IDENTITY.mig_class, f"{attr('profile')} == '1g.10gb'")])
    until(f"pod {pod} prepared", lambda: (bed.core.read_namespaced_pod(pod, ns).metadata.annotations or {})
          .get(PREPARED_ANNOTATION) == "true", timeout=120)
    # raw JSON: the typed models of some client versions drop fields newer than themselves
    items = json.loads(bed.resource.list_namespaced_resource_claim(ns, _preload_content=False).data)["items"]
    assert len(items) == 1, [c["metadata"]["name"] for c in items]
    return items[0]


def check_device_status(bed: TestBed, claim: dict) -> None:
    """StatusMismatch unless every allocated device of the claim has one Ready entry whose data names the UUID
    NVML has for it (the GPU's, or the MIG device's with its parent's)."""
    results = claim["status"]["allocation"]["devices"]["results"]
    entries = {(e["driver"], e["pool"], e["device"]): e for e in claim["status"].get("devices") or []}
    if sorted(entries) != sorted((r["driver"], r["pool"], r["device"]) for r in results):
        raise StatusMismatch(f"status.devices {sorted(entries)} != allocated {[(r['driver'], r['pool'], r['device']) for r in results]}")
    gpus, nvml = validate_state_dir(bed.cluster.home / "nvml" / NODE)
    gpu_uuids = {g.minor: g.uuid for g in gpus}
    for (_driver, _pool, device), entry in entries.items():
        ready = [c for c in entry.get("conditions") or [] if c["type"] == READY]
        if [c["status"] for c in ready] != ["True"]:
            raise StatusMismatch(f"{device}: conditions {entry.get('conditions')} have no Ready=True")
        ref = parse_device_name(device)
        gpu_uuid = gpu_uuids[ref.minor]
        data = entry.get("data") or {}
        if ref.is_mig:
            ci = [c for c in nvml.compute_instances if c.gpu == ref.minor and c.start == ref.start]
            if len(ci) != 1 or data.get("uuid") != ci[0].uuid or data.get("parentUUID") != gpu_uuid:
                raise StatusMismatch(f"{device}: data {data} does not name NVML's MIG device {ci} on GPU {gpu_uuid}")
        elif data.get("uuid") != gpu_uuid:
            raise StatusMismatch(f"{device}: data {data} does not name GPU {gpu_uuid}")


def test_a_prepared_claim_reports_its_devices(bed) -> None:
    with driver_cluster(bed, "devstatus", [NODE_SPEC]) as tb:
        ns = f"ds-{uuid.uuid4().hex[:6]}"
        create_namespace(tb.core, ns)
        check_device_status(tb, prepared_claim(tb, ns))


def test_the_check_fails_with_device_status_missing(bed) -> None:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip(f"the faulty bed runs with ${FULL_ENV}=full")  # allowed in suites/skips.yaml
    with driver_cluster(bed, "devstatus-fault", [NODE_SPEC], env=fault_env([DEVICE_STATUS_MISSING])) as tb:
        ns = f"ds-{uuid.uuid4().hex[:6]}"
        create_namespace(tb.core, ns)
        with pytest.raises(StatusMismatch):
            check_device_status(tb, prepared_claim(tb, ns))
