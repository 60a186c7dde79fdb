"""The plugin's status.devices entries (fake_gpus/driver/kubeletplugin/device_status.py) against a claim as the
API server returns it: what is written on prepare and unprepare, under which fault switch nothing is."""

from __future__ import annotations

from datetime import datetime, timezone

import pytest

from fake_gpus.driver.kubeletplugin.checkpoint import MigRecord, PreparedDevice
from fake_gpus.driver.kubeletplugin.device_status import (DEVICE_STATUS_LEFT, DEVICE_STATUS_MISSING, ClaimId, DeviceStatusWriter,
                                                          device_data, status_entries)

DRIVER, POOL, NODE = "gpu.nvidia.com", "node-a", "node-a"
NOW = datetime(2026, 12, 8, 0, 0, 0, tzinfo=timezone.utc)
GPU = PreparedDevice(["gpu"], POOL, "gpu-0", ["cdi/gpu-0"], "GPU-aaaa")
MIG = PreparedDevice(["mig"], POOL, "gpu-1-mig-1g10gb-19-6", ["cdi/mig"], "MIG-bbbb",
                     mig=MigRecord("GPU-cccc", 19, 6, 1, gi_id=9, ci_id=0, uuid="MIG-bbbb"), created=True,
                     config={"kind": "MigDeviceConfig", "strategy": "TimeSlicing"})
CLAIM = ClaimId("ns", "c", "uid-1")


def claim(results: list[dict], devices: list[dict] | None = None, uid: str = "uid-1") -> dict:
    status: dict = {"allocation": {"devices": {"results": results}}}
    if devices is not None:
        status["devices"] = devices
    return {"metadata": {"namespace": "ns", "name": "c", "uid": uid}, "status": status}


def result(device: str, request: str = "r", pool: str = POOL, driver: str = DRIVER, **extra) -> dict:
    return {"request": request, "driver": driver, "pool": pool, "device": device, **extra}


class Api:
    """The claim as the API server holds it, and each apply the writer sends."""

    def __init__(self, current: dict, fail: Exception | None = None) -> None:
        self.current = current
        self.fail = fail
        self.applied: list[tuple[str, str, dict, str]] = []

    def read(self, ns: str, name: str) -> dict:
        return self.current

    def apply(self, ns: str, name: str, body: dict, manager: str) -> None:
        if self.fail is not None:
            raise self.fail
        self.applied.append((ns, name, body, manager))


def writer(api: Api, faults: frozenset[str] = frozenset(), logged: list[str] | None = None) -> DeviceStatusWriter:
    return DeviceStatusWriter(DRIVER, POOL, NODE, api.read, api.apply, (logged if logged is not None else []).append, faults,
                              clock=lambda: NOW)


def test_entries_name_each_prepared_device_once_with_ready_and_its_uuids() -> None:
    c = claim([result("gpu-0", "a"), result("gpu-0", "b", adminAccess=True), result("gpu-1-mig-1g10gb-19-6", "mig"),
               result("gpu-0", driver="other.example.com"), result("gpu-3", pool="node-b")])
    entries = status_entries(c, DRIVER, POOL, [GPU, MIG], NODE, NOW)
    assert [(e["driver"], e["pool"], e["device"]) for e in entries] == [(DRIVER, POOL, "gpu-0"), (DRIVER, POOL, "gpu-1-mig-1g10gb-19-6")]
    for e in entries:
        assert [(x["type"], x["status"], x["reason"], x["lastTransitionTime"]) for x in e["conditions"]] == [
            ("Ready", "True", "Prepared", "2026-12-08T00:00:00Z")]
    assert entries[0]["data"] == {"uuid": "GPU-aaaa"}
    assert entries[1]["data"] == {"uuid": "MIG-bbbb", "parentUUID": "GPU-cccc", "gpuInstance": 9, "computeInstance": 0,
                                  "sharing": "TimeSlicing"}


def test_a_shared_device_entry_carries_its_allocations_share_id() -> None:
    entries = status_entries(claim([result("gpu-0", shareID="6a1c-share")]), DRIVER, POOL, [GPU], NODE, NOW)
    assert entries[0]["shareID"] == "6a1c-share"


def test_a_device_already_ready_keeps_its_transition_time() -> None:
    before = [{"driver": DRIVER, "pool": POOL, "device": "gpu-0",
               "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": "2026-01-01T00:00:00Z"}]}]
    entries = status_entries(claim([result("gpu-0")], before), DRIVER, POOL, [GPU], NODE, NOW)
    assert entries[0]["conditions"][0]["lastTransitionTime"] == "2026-01-01T00:00:00Z"


def test_prepare_applies_our_entries_and_unprepare_applies_none() -> None:
    api = Api(claim([result("gpu-0")]))
    w = writer(api)
    w.prepared(CLAIM, [GPU])
    w.unprepared(CLAIM)
    (_, _, first, manager), (_, _, second, _) = api.applied
    assert manager == f"{DRIVER}/kubelet-plugin"
    assert first["metadata"] == {"name": "c", "namespace": "ns", "uid": "uid-1"}  # the UID: a recreated claim is refused
    assert [e["device"] for e in first["status"]["devices"]] == ["gpu-0"]
    assert second["status"]["devices"] == []


def test_a_claim_replaced_meanwhile_is_not_written() -> None:
    api = Api(claim([result("gpu-0")], uid="uid-2"))
    writer(api).prepared(CLAIM, [GPU])
    assert api.applied == []


@pytest.mark.parametrize("fault, step", [(DEVICE_STATUS_MISSING, "prepared"), (DEVICE_STATUS_LEFT, "unprepared")])
def test_each_switch_drops_its_write(fault: str, step: str) -> None:
    clean, faulty = Api(claim([result("gpu-0")])), Api(claim([result("gpu-0")]))
    for api, faults in ((clean, frozenset()), (faulty, frozenset({fault}))):
        w = writer(api, faults)
        w.prepared(CLAIM, [GPU]) if step == "prepared" else w.unprepared(CLAIM)
    assert len(clean.applied) == 1 and faulty.applied == []


def test_a_failed_write_is_logged_and_a_missing_claim_is_not() -> None:
    class Refused(Exception):
        status, reason, body = 403, "Forbidden", '{"message": "resourceclaims/status is forbidden"}'

    class Gone(Exception):
        status, reason, body = 404, "Not Found", ""

    logged: list[str] = []
    writer(Api(claim([result("gpu-0")]), Refused()), logged=logged).prepared(CLAIM, [GPU])
    writer(Api(claim([result("gpu-0")]), Gone()), logged=logged).unprepared(CLAIM)
    assert logged == ["claim ns/c: writing status.devices failed: HTTP 403 resourceclaims/status is forbidden"]


def test_whole_gpu_data_names_only_its_uuid() -> None:
    assert device_data(GPU) == {"uuid": "GPU-aaaa"}
