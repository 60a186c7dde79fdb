"""The stand-in kubelet's resource health (KEP-4680): a plugin's health stream -> `allocatedResourcesStatus`.

As the kubelet's DRA manager does it (pkg/kubelet/cm/dra/manager.go, UpdateAllocatedResourcesStatus and
HandleWatchResourcesStream, read at kubernetes/kubernetes master): it keeps the last health the plugin sent per
(pool, device), forgets all of them when the stream ends (Unknown), and writes into each container status of a
pod, for each claim the container names, one entry `claim:<pod claim name>[/<request>]` listing every device
prepared for that claim: `resourceID` the device's first CDI id (`<driver>/<pool>/<device>` for a device without
one) and `health` Healthy, Unhealthy or Unknown. The claim is found only through the pod's
status.resourceClaimStatuses, so only claims made from a ResourceClaimTemplate get an entry, as in the kubelet.

The kubelet writes the field only with gate ResourceHealthStatus on, which the apiserver needs too (it drops
the field otherwise): alpha and off on 1.34 and 1.35, beta and on from 1.36 (`kube-apiserver --help` of the
pinned releases), so the stand-in writes it from FIRST_MINOR_WITH_FIELD on.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Iterator, Mapping

FIRST_MINOR_WITH_FIELD = (1, 36)
HEALTHY, UNHEALTHY, UNKNOWN = "Healthy", "Unhealthy", "Unknown"
RECONNECT_S = 1.0  # a stream that ended is opened again after this, as the kubelet does while the plugin is registered
STREAM_DEADLINE_S = 365 * 24 * 3600.0  # the kubelet's stream has no deadline; gRPC's must be a number


def writes_health(minor: str) -> bool:
    """Whether the stand-in kubelet of `minor` writes allocatedResourcesStatus (its gate on by default)."""
    return tuple(int(p) for p in minor.split(".")[:2]) >= FIRST_MINOR_WITH_FIELD


def minor_with_field(asked: str) -> str:
    """The minor of a bed that shows the field: `asked`, or the first that serves it if `asked` is older."""
    return ".".join(map(str, max(tuple(int(p) for p in asked.split(".")[:2]), FIRST_MINOR_WITH_FIELD)))


@dataclass(frozen=True)
class PreparedDevice:
    """One device the plugin prepared for a claim, as NodePrepareResources answered."""

    pool: str
    device: str
    cdi_ids: tuple[str, ...]

    def resource_id(self, driver: str) -> str:
        return self.cdi_ids[0] if self.cdi_ids else f"{driver}/{self.pool}/{self.device}"


class HealthStream:
    """A plugin's health stream, followed on a thread: the health it last sent per (pool, device)."""

    def __init__(self, open_stream: Callable[[], Iterator], on_change: Callable[[], None]) -> None:
        self._open, self._on_change = open_stream, on_change
        self._health: dict[tuple[str, str], str] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._stream = None
        self._thread = threading.Thread(target=self._follow, daemon=True, name="health-stream")

    def start(self) -> "HealthStream":
        self._thread.start()
        return self

    def health(self, pool: str, device: str) -> str:
        with self._lock:
            return self._health.get((pool, device), UNKNOWN)

    def _follow(self) -> None:
        while not self._stop.is_set():
            try:
                self._stream = self._open()
                for message in self._stream:
                    self._update({(d.device.pool_name, d.device.device_name): _health_name(d.health) for d in message.devices})
            except Exception:  # noqa: BLE001 - the plugin went or restarts: every device Unknown, then open again
                pass
            self._update({})  # the kubelet clears the driver's health when its stream ends
            self._stop.wait(RECONNECT_S)

    def _update(self, reported: dict[tuple[str, str], str]) -> None:
        with self._lock:
            changed, self._health = reported != self._health, reported
        if changed:
            self._on_change()

    def stop(self) -> None:
        self._stop.set()
        stream = self._stream
        if stream is not None:
            stream.cancel()
        self._thread.join(timeout=5)


def _health_name(value: int) -> str:
    # dra-health/v1alpha1 HealthStatus: UNKNOWN 0, HEALTHY 1, UNHEALTHY 2
    return {1: HEALTHY, 2: UNHEALTHY}.get(value, UNKNOWN)


def container_statuses(pod: dict, devices_of: Callable[[str], list[PreparedDevice] | None], driver: str,
                       health: Callable[[str, str], str]) -> list[dict]:
    """The pod's status.containerStatuses (API dicts) with allocatedResourcesStatus as the kubelet writes it;
    `devices_of(claim name)`: the devices prepared for that ResourceClaim of the pod (None: not prepared here)."""
    spec = {c["name"]: c for c in pod["spec"].get("containers", ())}
    generated = {s["name"]: s.get("resourceClaimName") for s in pod.get("status", {}).get("resourceClaimStatuses") or ()}
    out = []
    for status in pod.get("status", {}).get("containerStatuses") or ():
        refs = ((spec.get(status["name"]) or {}).get("resources") or {}).get("claims") or ()
        if not refs:
            out.append(status)
            continue
        entries = {e["name"]: e for e in status.get("allocatedResourcesStatus") or ()}
        for ref in refs:
            claim = generated.get(ref["name"])
            devices = devices_of(claim) if claim else None
            if devices is None:
                continue  # the kubelet finds no claim info: the entry, if any, stays as it was
            name = f"claim:{ref['name']}" + (f"/{ref['request']}" if ref.get("request") else "")
            entries[name] = {"name": name, "resources": [{"resourceID": d.resource_id(driver), "health": health(d.pool, d.device)}
                                                         for d in devices]}
        kept = sorted((e for e in entries.values() if e.get("resources")), key=lambda e: e["name"])
        updated = {k: v for k, v in status.items() if k != "allocatedResourcesStatus"}
        if kept:
            updated["allocatedResourcesStatus"] = kept
        out.append(updated)
    return out


def differs(old: list[dict], new: list[dict]) -> bool:
    """Whether the containers' allocatedResourcesStatus differ (the kubelet builds it from a map: order is no news)."""
    def view(statuses: list[dict]) -> Mapping[str, list]:
        return {s["name"]: sorted((e["name"], sorted((r["resourceID"], r.get("health")) for r in e.get("resources") or ()))
                                  for e in s.get("allocatedResourcesStatus") or ()) for s in statuses}
    return view(old) != view(new)
