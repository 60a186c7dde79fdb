"""The claim's `status.devices` (KEP-4817): what the plugin reports about each device it prepared.

NVIDIA's gpu-kubelet-plugin writes no device status; ours does, as an addition: after a claim is prepared,
each of its devices on this node gets an entry with a `Ready` condition and the facts a user cannot read
anywhere else in the API (which physical GPU or MIG instance backs the device: the UUID that nvidia-smi,
NVIDIA_VISIBLE_DEVICES and DCGM's metrics name it by). Unprepare takes the entries away again.

Entries are written by server-side apply on the status subresource under the plugin's own field manager
(fake_gpus/driver/claim_status.py): it owns exactly our entries and conditions, leaves other writers' alone,
and an apply without them removes just ours.

A write that fails is logged and the prepare stands: the container's access to the device does not depend
on the report (a cluster without the RBAC for it, e.g. an older chart, still runs pods).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Callable

from fake_gpus.driver.claim_status import Apply, condition, error_text, status_body
from fake_gpus.driver.kubeletplugin.checkpoint import PreparedDevice

DEVICE_STATUS_MISSING = "device-status-missing"  # fault switch: prepare writes no status.devices entries
DEVICE_STATUS_LEFT = "device-status-left"  # fault switch: unprepare leaves the entries in place

READY = "Ready"
FIELD_MANAGER_SUFFIX = "/kubelet-plugin"


@dataclass(frozen=True)
class ClaimId:
    namespace: str
    name: str
    uid: str


def device_data(device: PreparedDevice) -> dict:
    """The driver-specific facts of one prepared device (the entry's `data`).

    `uuid` is what the container sees: the GPU's UUID, or for a MIG device the MIG device's own UUID (what
    NVIDIA_VISIBLE_DEVICES and CUDA_VISIBLE_DEVICES name); a MIG device adds its parent GPU's UUID and its GPU
    and compute instance ids, which DCGM's per-MIG metrics are labelled with. `sharing` names the strategy the
    device's config applied (TimeSlicing, MPS) where a config chose one."""
    data: dict = {"uuid": device.visible_uuid}
    if device.mig is not None:
        data.update(parentUUID=device.mig.gpu_uuid, gpuInstance=device.mig.gi_id, computeInstance=device.mig.ci_id)
    strategy = (device.config or {}).get("strategy")
    if strategy:
        data["sharing"] = strategy
    return data


def status_entries(claim: dict, driver: str, pool: str, devices: list[PreparedDevice], node: str, now: datetime) -> list[dict]:
    """One entry per allocation result of this driver and pool whose device was prepared, in allocation order;
    a result's shareID (consumable shares) is part of the entry's key and so is copied. A device already
    reported Ready keeps its condition's lastTransitionTime (a prepare repeated after a plugin restart changes
    nothing)."""
    prepared = {d.device_name: d for d in devices}
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    since = {(e.get("driver"), e.get("pool"), e.get("device"), e.get("shareID", "")): c.get("lastTransitionTime")
             for e in status.get("devices") or [] for c in e.get("conditions") or []
             if c.get("type") == READY and c.get("status") == "True"}
    entries: list[dict] = []
    seen: set[tuple[str, str]] = set()
    for result in results:
        device = prepared.get(result.get("device", ""))
        key = (result.get("device", ""), result.get("shareID", ""))
        if result.get("driver") != driver or result.get("pool") != pool or device is None or key in seen:
            continue  # admin access may list a device under two requests; the status lists it once
        seen.add(key)
        entry: dict = {"driver": driver, "pool": pool, "device": device.device_name}
        if result.get("shareID"):
            entry["shareID"] = result["shareID"]
        ready = condition(READY, "Prepared", f"prepared by the kubelet plugin on node {node}", now)
        ready["lastTransitionTime"] = since.get((driver, pool, device.device_name, key[1])) or ready["lastTransitionTime"]
        entry["conditions"] = [ready]
        entry["data"] = device_data(device)
        entries.append(entry)
    return entries


class DeviceStatusWriter:
    """Writes and removes this node's entries in claims' status.devices through `apply(namespace, name, body,
    field_manager)`; failures go to `log` (see the module's docstring)."""

    def __init__(self, driver: str, pool: str, node: str, read_claim: Callable[[str, str], dict],
                 apply: Apply, log: Callable[[str], None], faults: frozenset[str] = frozenset(),
                 clock: Callable[[], datetime] = lambda: datetime.now(timezone.utc)) -> None:
        self.driver, self.pool, self.node = driver, pool, node
        self.read_claim = read_claim
        self.apply = apply
        self.log = log
        self.faults = faults
        self.clock = clock
        self.field_manager = driver + FIELD_MANAGER_SUFFIX

    def prepared(self, claim: ClaimId, devices: list[PreparedDevice]) -> None:
        """Report the prepared `devices` of `claim`, read afresh: its allocation's shareIDs and the entries
        already there."""
        if DEVICE_STATUS_MISSING in self.faults:
            return
        try:
            current = self.read_claim(claim.namespace, claim.name)
        except Exception as exc:  # noqa: BLE001 - as a failed write (module docstring)
            self.log(f"claim {claim.namespace}/{claim.name}: reading it for status.devices failed: {exc}")
            return
        if (current.get("metadata") or {}).get("uid") != claim.uid:
            return  # replaced meanwhile: the new claim is not ours to report on
        self._apply(claim, status_entries(current, self.driver, self.pool, devices, self.node, self.clock()))

    def unprepared(self, claim: ClaimId) -> None:
        """Take this plugin's entries off `claim` (gone already, or deallocated: nothing to do)."""
        if DEVICE_STATUS_LEFT in self.faults:
            return
        self._apply(claim, [])

    def _apply(self, claim: ClaimId, entries: list[dict]) -> None:
        try:
            self.apply(claim.namespace, claim.name, status_body(claim.namespace, claim.name, claim.uid, entries), self.field_manager)
        except Exception as exc:  # noqa: BLE001 - a report that failed never fails the prepare (module docstring)
            if getattr(exc, "status", None) == 404:
                return  # the claim is gone: nothing left to report on
            self.log(f"claim {claim.namespace}/{claim.name}: writing status.devices failed: {error_text(exc)}")
