"""GPU health (docs/design/health.md): a node whose driver monitors its GPUs keeps new claims off a failed one.

They apply where the layout promises a node with health checks (`healthCheck: true`, a mode ending `:health`:
NVIDIA's NVMLDeviceHealthCheck gate for that pool); elsewhere they are not applicable (not-run). A fault is
appended to the node's fake-NVML events log (what `dra-testbed gpu fail` does), so they need the node's NVML
state (`node-nvml`: a KWOK bed of the suite's own). The keys are NVIDIA's schema under the driver's name:
`<driver>/xid` with the Xid as value, `<driver>/gpu-lost`.

The checks share the first promised node and run in table order, each on a GPU the ones before it left as the
rule says: a fatal Xid on GPU 0 (its taint stays: NVIDIA's never lifts one, ours only after a GPU reset), a lost
GPU 1 healed again, the heal itself (SHOULD: NVIDIA's driver lifts no taint until it restarts), then an
application Xid on GPU 1. The application Xid comes last because on 1.34 NVIDIA's republish of its effect-None
taint is refused and freezes the node's slice, so no check after it could see a taint.
"""

from __future__ import annotations

import time
from contextlib import contextmanager
from dataclasses import dataclass
from functools import partial
from typing import Callable, Iterator

from fake_gpus.nvml import health as nvml_health
from fake_gpus.nvml import state
from testbed.conformance import probes
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.subject import Subject

NOT_APPLICABLE = "not applicable: the layout promises no node with health checks (healthCheck: true or a mode ending :health)"
NO_SCHEDULE = "NoSchedule"
TAINT_BOUND_S = 10.0  # injection to taint in the slice: NVIDIA's 0.05-0.14 s, ours about 1 s (one publisher poll)
HEAL_BOUND_S = 15.0  # heal to the taint gone: a monitor's next wait plus a republish
IGNORED_LOOK_S = 4.0  # how long an application Xid must leave its device schedulable (1.34 publishes nothing for it)
FATAL_XID, IGNORED_XID = 79, 13  # "GPU has fallen off the bus"; a graphics engine exception the application caused
FATAL_GPU, LOST_GPU = 0, 1
REINJECT_S = 2.0

Taints = dict[str, list[dict]]


def health_node(subject: Subject) -> str:
    """The first node the layout promises health checks on; NotRun where none is, or its NVML is out of reach."""
    promised = sorted(n.name for n in subject.layout.nodes if n.mode.health) if subject.layout else []
    if not promised:
        raise NotRun(NOT_APPLICABLE)
    if subject.node_nvml is None:
        raise NotRun("needs the nodes' NVML to inject GPU faults (a KWOK bed of the suite's own)")
    return promised[0]


def device_taints(subject: Subject, node: str) -> Taints:
    """Device name -> its taints (key, value, effect; timeAdded left out) over the node's slices of the driver."""
    found: Taints = {}
    for s in subject.resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items:
        if s.spec.driver != subject.driver:
            continue
        for d in s.spec.devices or ():
            found[d.name] = [{k: v for k, v in (("key", t.key), ("value", t.value), ("effect", t.effect)) if v is not None}
                             for t in d.taints or ()]
    return found


def gpu_devices(subject: Subject, node: str) -> dict[int, tuple[str, str]]:
    """GPU index (the node's NVML) -> (published device name, uuid) of its whole-GPU device."""
    gpus, _ = state.validate_state_dir(subject.node_nvml(node))  # type: ignore[misc]
    index = {g.uuid: g.index for g in gpus}
    found = {}
    for s in subject.slices():
        if s["spec"].get("nodeName") != node:
            continue
        for d in s["spec"].get("devices") or ():
            uuid = (d.get("attributes") or {}).get("uuid", {}).get("string")
            if uuid in index and (d.get("attributes") or {}).get("type", {}).get("string") == "gpu":
                found[index[uuid]] = (d["name"], uuid)
    return found


def _gpu(subject: Subject, node: str, gpu: int) -> tuple[str, str]:
    devices = gpu_devices(subject, node)
    if gpu not in devices:
        raise CheckFailed(f"node {node} publishes no whole-GPU device for its GPU {gpu} (published: {sorted(devices)})")
    return devices[gpu]


def _inject(subject: Subject, node: str, gpu: int, kind: str, xid: int = 0) -> float:
    nvml_health.append(subject.node_nvml(node), gpu, kind, xid)  # type: ignore[misc]
    return time.monotonic()


def _wait(subject: Subject, node: str, device: str, holds, bound: float, seen: dict, label: str,
          again: Callable[[], object] | None = None) -> float | None:
    """Seconds until `holds(taints of device)`, polled every 0.1 s; None after `bound`. The last taints go to `seen`.
    `again` repeats the injection every REINJECT_S until then: no API shows when a driver's monitor has registered
    its NVML events, and an event appended before that reaches no one (seen on a fresh bed: the first Xid missed)."""
    began = last = time.monotonic()
    while True:
        taints = device_taints(subject, node).get(device, [])
        seen[label] = taints
        if holds(taints):
            return round(time.monotonic() - began, 2)
        if time.monotonic() - began > bound:
            return None
        if again is not None and time.monotonic() - last > REINJECT_S:
            again()
            last = time.monotonic()
            seen[f"{label} injections"] = seen.get(f"{label} injections", 1) + 1
        time.sleep(0.1)


def _has(key: str, effect: str | None = NO_SCHEDULE, value: str | None = None):
    return lambda taints: any(t["key"] == key and (effect is None or t["effect"] == effect)
                              and (value is None or t.get("value") == value) for t in taints)


def _claim_for(subject: Subject, namespace: str, node: str, uuid: str, seen: dict) -> probes.Probe:
    """A new claim for the GPU of `uuid` (a pod on its node), as the scheduler left it; kept in the evidence."""
    request = probes.exactly("gpu", subject.gpu_class, f"device.attributes['{subject.driver}'].uuid == '{uuid}'")
    probe = probes.run(subject, namespace, [request], node)
    seen["claim"] = probe.as_dict()
    return probe


@dataclass
class Failing:
    """One check's GPU of the health node: its device, the taint key judged, the evidence, a namespace for claims."""

    node: str
    gpu: int
    device: str
    uuid: str
    key: str
    seen: dict
    namespace: str | None


@contextmanager
def failing(subject: Subject, evidence: Evidence, gpu: int, key_suffix: str, name: str, claims: bool = False) -> Iterator[Failing]:
    """The check's GPU `gpu` of the health node and taint key `<driver>/<key_suffix>`; the evidence goes to `name`
    and the claims' namespace (with `claims`) is dropped afterwards, however the check ended."""
    node = health_node(subject)
    device, uuid = _gpu(subject, node, gpu)
    run = Failing(node, gpu, device, uuid, f"{subject.driver}/{key_suffix}", {"node": node, "device": device},
                  subject.namespace() if claims else None)
    try:
        yield run
    finally:
        evidence.write(name, run.seen)
        if run.namespace:
            subject.drop_namespace(run.namespace)


def fatal_xid(subject: Subject, evidence: Evidence) -> None:
    with failing(subject, evidence, FATAL_GPU, "xid", "fatal-xid.json", claims=True) as f:
        fail = partial(_inject, subject, f.node, f.gpu, "xid", FATAL_XID)
        fail()
        f.seen["seconds"] = _wait(subject, f.node, f.device, _has(f.key, NO_SCHEDULE, str(FATAL_XID)), TAINT_BOUND_S, f.seen, "taints", fail)
        if f.seen["seconds"] is None:
            raise CheckFailed(f"Xid {FATAL_XID} on GPU {f.gpu} of {f.node}: no taint ({f.key}={FATAL_XID}, NoSchedule) on "
                              f"{f.device} within {TAINT_BOUND_S:.0f} s; its taints: {f.seen['taints']}")
        assert f.namespace is not None
        probe = _claim_for(subject, f.namespace, f.node, f.uuid, f.seen)
        if probe.scheduled:
            raise CheckFailed(f"a new claim for {f.device} (tainted {f.key}={FATAL_XID} NoSchedule) was allocated: {probe.devices()}")


def lost_gpu(subject: Subject, evidence: Evidence) -> None:
    with failing(subject, evidence, LOST_GPU, "gpu-lost", "lost-gpu.json") as f:
        lose = partial(_inject, subject, f.node, f.gpu, "lost")
        lose()
        try:
            f.seen["seconds"] = _wait(subject, f.node, f.device, _has(f.key), TAINT_BOUND_S, f.seen, "taints", lose)
            if f.seen["seconds"] is None:
                raise CheckFailed(f"GPU {f.gpu} of {f.node} lost: no taint ({f.key}, NoSchedule) on {f.device} within "
                                  f"{TAINT_BOUND_S:.0f} s; its taints: {f.seen['taints']}")
        finally:
            _inject(subject, f.node, f.gpu, "heal")  # the checks after it get the GPU back (a lost GPU answers nothing)


def heal(subject: Subject, evidence: Evidence) -> None:
    with failing(subject, evidence, LOST_GPU, "gpu-lost", "heal.json", claims=True) as f:
        lose = partial(_inject, subject, f.node, f.gpu, "lost")
        lose()
        # NoSchedule, as lost-gpu asks: a driver whose taint takes effect None publishes none on 1.34 (no such effect
        # there) and one on 1.35+, so any other precondition would make this check's verdict depend on the minor
        f.seen["lost seconds"] = _wait(subject, f.node, f.device, _has(f.key), TAINT_BOUND_S, f.seen, "taints when lost", lose)
        if f.seen["lost seconds"] is None:
            raise CheckFailed(f"GPU {f.gpu} of {f.node} lost: no taint ({f.key}, NoSchedule) on {f.device} within "
                              f"{TAINT_BOUND_S:.0f} s, so nothing to heal")
        _inject(subject, f.node, f.gpu, "heal")
        f.seen["heal seconds"] = _wait(subject, f.node, f.device, lambda t: not _has(f.key, None)(t), HEAL_BOUND_S, f.seen, "taints healed")
        if f.seen["heal seconds"] is None:
            raise CheckFailed(f"GPU {f.gpu} of {f.node} healed: {f.device} still carries {f.seen['taints healed']} after {HEAL_BOUND_S:.0f} s")
        assert f.namespace is not None
        probe = _claim_for(subject, f.namespace, f.node, f.uuid, f.seen)
        if not probe.scheduled or [d for _, d in probe.devices()] != [f.device]:
            raise CheckFailed(f"GPU {f.gpu} of {f.node} healed and untainted: a claim for {f.device} was not allocated: {probe.message!r}")


def ignored_xid(subject: Subject, evidence: Evidence) -> None:
    with failing(subject, evidence, LOST_GPU, "xid", "ignored-xid.json") as f:
        f.seen["xid"] = IGNORED_XID
        fail = partial(_inject, subject, f.node, f.gpu, "xid", IGNORED_XID)
        fail()
        # the driver's answer to it: an xid taint (effect None on 1.35+) or, where none is published, nothing at all
        f.seen["seconds"] = _wait(subject, f.node, f.device, _has(f.key, None, str(IGNORED_XID)), IGNORED_LOOK_S, f.seen, "taints", fail)
        if _has(f.key, NO_SCHEDULE)(f.seen["taints"]):
            raise CheckFailed(f"application Xid {IGNORED_XID} on GPU {f.gpu} of {f.node}: {f.device} tainted NoSchedule: {f.seen['taints']}")
