"""Device health as NVIDIA's DRA driver publishes it: an NVML health event -> a DRA device taint.

The rule (docs/design/health.md, "NVIDIA's health rule", read off its cmd/gpu-kubelet-plugin/device_health.go):
one taint key per kind of failure under the driver's domain, the latest event of a kind replacing the
earlier one on a device. An Xid taints with the Xid as value, NoSchedule unless the Xid is an application
error (then effect None: recorded, not acted on); a lost GPU taints NoSchedule without a value; a GPU
whose events cannot be registered taints None. ECC events are registered but taint nothing.

Where a taint lands is a `Scope`: every device of the node, every device of one GPU, or one device by
name. `apply_taints` puts a node's taints on the devices of its slices (the API's `devices[].taints`).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Iterable, Mapping

# NVIDIA's Xid catalog calls these application errors: the GPU itself is still healthy, so a taint records
# them with effect None (docs.nvidia.com/deploy/xid-errors; NVIDIA's driver skips the same six).
APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})

XID, GPU_LOST, UNMONITORED = "xid", "gpu-lost", "unmonitored"  # key suffixes under the driver's domain
ECC_SINGLE, ECC_DOUBLE = "ecc-single", "ecc-double"
EVENT_KINDS = (XID, ECC_SINGLE, ECC_DOUBLE, GPU_LOST, UNMONITORED)
NO_SCHEDULE, NO_EXECUTE, EFFECT_NONE = "NoSchedule", "NoExecute", "None"

NODE = "*"  # a scope: every device of the node
GPU_PREFIX = "gpu:"  # a scope: every device of the GPU with this UUID


class XidListError(ValueError):
    """An --additional-xids-to-ignore entry that is not an Xid; one line naming it and what is valid."""


@dataclass(frozen=True)
class Taint:
    """One device taint: `key` under the driver's domain, `value` (None: no value), `effect`."""

    key: str
    value: str | None
    effect: str
    order: int = field(default=0, compare=False)  # when its key first came to the device: the API lists taints so

    def body(self) -> dict[str, str]:
        """The taint as resource.k8s.io/v1 writes it (timeAdded is the API server's)."""
        body = {"key": self.key, "effect": self.effect}
        if self.value is not None:
            body["value"] = self.value
        return body


@dataclass(frozen=True)
class HealthEvent:
    """What NVML reported: `kind` one of EVENT_KINDS, `xid` the Xid for XID events."""

    kind: str
    xid: int | None = None


def parse_xid_list(text: str) -> frozenset[int]:
    """An --additional-xids-to-ignore value: comma-separated whole numbers, blanks between commas allowed.

    NVIDIA's driver drops a malformed entry silently; ours refuses it (XidListError), so a typo in the
    list cannot quietly taint GPUs the operator meant to keep in service."""
    xids = set()
    for entry in text.split(","):
        entry = entry.strip()
        if not entry:
            continue
        if not (entry.isascii() and entry.isdigit()):
            raise XidListError(f"additional Xid to ignore {entry!r} is not a whole number; valid: a comma-separated list such as 48,94")
        xids.add(int(entry))
    return frozenset(xids)


def ignored_xids(additional: Iterable[int] = (), faults: frozenset[str] = frozenset()) -> frozenset[int]:
    """The Xids whose taints take effect None: the application errors and the operator's additions. The
    `ignored-xids-wrong` switch forgets the application errors, so they keep GPUs from new claims."""
    base = frozenset() if "ignored-xids-wrong" in faults else APPLICATION_XIDS
    return base | frozenset(additional)


def taint_for(event: HealthEvent, driver: str, ignored: frozenset[int], faults: frozenset[str] = frozenset()) -> Taint | None:
    """The taint `event` puts on its devices (None: the event taints nothing, as ECC events in NVIDIA's
    driver, which registers them and then skips every event that is not an Xid)."""
    if event.kind == XID:
        if event.xid is None:
            raise ValueError("an Xid event needs its Xid")
        fatal = event.xid not in ignored
        effect = NO_SCHEDULE if fatal and "taint-wrong-effect" not in faults else EFFECT_NONE
        return Taint(f"{driver}/{XID}", str(event.xid), effect)
    if event.kind == GPU_LOST:
        return Taint(f"{driver}/{GPU_LOST}", None, EFFECT_NONE if "taint-wrong-effect" in faults else NO_SCHEDULE)
    if event.kind == UNMONITORED:
        return Taint(f"{driver}/{UNMONITORED}", None, EFFECT_NONE)
    if event.kind in (ECC_SINGLE, ECC_DOUBLE):
        return None
    raise ValueError(f"unknown health event kind {event.kind!r}; valid: {', '.join(EVENT_KINDS)}")


def with_taint(current: tuple[Taint, ...], taint: Taint) -> tuple[Taint, ...]:
    """`current` with `taint` added last, or replacing value and effect of the taint of its key in place
    (one taint per key, the latest event's, in the order keys came: as NVIDIA's driver keeps them)."""
    if any(t.key == taint.key for t in current):
        return tuple(replace(t, value=taint.value, effect=taint.effect) if t.key == taint.key else t for t in current)
    return current + (taint,)


def gpu_scope(uuid: str) -> str:
    return f"{GPU_PREFIX}{uuid}"


def _device_gpu(device: dict) -> str | None:
    """The UUID of the GPU a published device belongs to: its parentUUID (MIG) or its own uuid (a GPU)."""
    attributes = device.get("attributes", {})
    if "parentUUID" in attributes:
        return attributes["parentUUID"].get("string")
    kind = attributes.get("type", {}).get("string")
    return attributes.get("uuid", {}).get("string") if kind in (None, "gpu") else None


def device_taints(device: dict, driver: str, taints: Mapping[str, tuple[Taint, ...]]) -> tuple[Taint, ...]:
    """The taints of one published device: the node's, its GPU's and its own, one per key (the device's own
    first, then its GPU's, then the node's: the narrowest scope knows best), in the order they came."""
    found: dict[str, Taint] = {}
    gpu = _device_gpu(device)
    for scope in (device["name"], gpu_scope(gpu) if gpu else None, NODE):
        for taint in taints.get(scope, ()) if scope else ():
            found.setdefault(taint.key, taint)
    return tuple(sorted(found.values(), key=lambda t: t.order))


def apply_taints(bodies: list[dict], driver: str, taints: Mapping[str, tuple[Taint, ...]],
                 faults: frozenset[str] = frozenset(), effect_none: bool = True) -> list[dict]:
    """The slice bodies with each device's taints set (`taints`: scope -> taints). Where the served API has
    no effect None (`effect_none` False: 1.34) those taints are left out: the API refuses the whole slice
    for one (NVIDIA's driver sends it and its republish fails, fatal taints with it), and they change no
    scheduling. The `taint-never-published` switch leaves every device untainted although the monitor saw
    the events."""
    if not taints or "taint-never-published" in faults:
        return bodies
    for body in bodies:
        for device in body["spec"].get("devices", ()):
            found = [t for t in device_taints(device, driver, taints) if effect_none or t.effect != EFFECT_NONE]
            if found:
                device["taints"] = [t.body() for t in found]
    return bodies
