"""Shared devices (KEP-5075 consumable capacity): a device several claims may hold at once, each taking part of
its capacity.

They apply where the driver publishes a shareable device (`allowMultipleAllocations`) or the layout promises a
node that shares (`consumableShares`, `:shares=` in a mode); elsewhere they are not applicable (not-run).
The API server validates a shareable device's request policies itself (a policy without
allowMultipleAllocations, a maximum or default above the capacity, a step that does not divide the range: see
docs/design/sharing.md), so a driver getting them wrong shows as a promised node without shareable devices.
The live check judges the real scheduler's accounting against the product's real memory (the catalog), so a
driver overstating the memory it shares is caught although the API server accepts its slices.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from kubernetes.utils import parse_quantity

from testbed.conformance import probes
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.slice_checks import _fail_if
from testbed.conformance.subject import Subject
from testbed.workloads.devices import Device, Inventory
from testbed.workloads.truth import board_of

MIB = 2**20
MEMORY = "memory"
NOT_APPLICABLE = "not applicable: the driver publishes no shareable device (allowMultipleAllocations) and the layout promises none"
# the three claims of the live check, as shares of the device's real memory: two fit together, the third fits
# beside one of them but not beside both
FIRST, SECOND, THIRD = Decimal("0.4"), Decimal("0.4"), Decimal("0.5")


def promised(subject: Subject) -> dict[str, str]:
    """The layout's nodes that are to share their devices, with their consumable-shares value."""
    return {n.name: n.mode.shares for n in subject.layout.nodes if n.mode.shares} if subject.layout else {}


def shareable(inventory: Inventory) -> list[Device]:
    """The published devices several claims may hold at once, by node and name."""
    return sorted((d for d in inventory.devices.values() if d.allow_multiple), key=lambda d: (d.node or "", d.id.pool, d.id.device))


def _raw_devices(slices: list[dict], node: str) -> list[dict]:
    return [d for s in slices if s["spec"].get("nodeName") == node for d in s["spec"].get("devices") or []]


def published(subject: Subject, evidence: Evidence) -> None:
    slices = subject.slices()
    promises, shared = promised(subject), shareable(Inventory.from_slices(slices))
    if not promises and not shared:
        raise NotRun(NOT_APPLICABLE)
    problems = []
    for node, shares in sorted(promises.items()):
        devices = _raw_devices(slices, node)
        if not devices:
            problems.append(f"node {node} is to share its devices (consumable shares {shares}) but publishes none: "
                            "the API server refuses a slice whose request policies are invalid (see evidence)")
        single = sorted(d["name"] for d in devices if not d.get("allowMultipleAllocations"))
        if single:
            problems.append(f"node {node} is to share its devices (consumable shares {shares}) but {', '.join(single)} "
                            "do not allow multiple allocations")
    evidence.write("shareable.json", {f"{d.node}/{d.id.pool}/{d.id.device}": {k.rsplit("/", 1)[-1]: str(v) for k, v in d.capacity.items()}
                                      for d in shared})
    evidence.write("promised.json", promises)
    _fail_if(problems, evidence, "shared devices")


@dataclass(frozen=True)
class SharedGpu:
    """A shareable device with a memory capacity, and the memory its product really has."""

    device: Device
    real_mib: int
    device_class: str
    selector: str


def shared_gpu(subject: Subject, inventory: Inventory) -> SharedGpu:
    """The first shareable device with a uuid and a memory capacity of a product the catalog knows (a promised
    node's first); CheckFailed when a promised node has none, NotRun when nothing shares."""
    promises = promised(subject)
    candidates = [d for d in shareable(inventory) if d.attribute("uuid") and d.capacity_of(MEMORY) and board_of(d)
                  and _shares(d) != 1]
    candidates.sort(key=lambda d: d.node not in promises)
    if not candidates:
        if promises:
            raise CheckFailed(f"nodes {', '.join(sorted(promises))} are to share their devices but publish no shareable device with a memory capacity")
        raise NotRun(NOT_APPLICABLE)
    device = candidates[0]
    board = board_of(device)
    assert board is not None
    kind = str(device.attribute("type"))
    device_class = subject.mig_class if kind == "mig" else subject.gpu_class
    return SharedGpu(device, board.memory_mib if kind != "mig" else int(device.capacity_of(MEMORY)) // MIB, device_class,
                     f"device.attributes['{subject.driver}'].uuid == '{device.attribute('uuid')}'")


def _shares(device: Device) -> Decimal | None:
    """NVIDIA's `shares` capacity (at most that many claims), if the device has one."""
    return device.capacity_of("shares")


def _asking(gpu: SharedGpu, name: str, mib: int) -> dict:
    request = probes.exactly(name, gpu.device_class, gpu.selector)
    request["exactly"]["capacity"] = {"requests": {MEMORY: f"{mib}Mi"}}
    return request


def _consumed(subject: Subject, namespace: str, gpu: SharedGpu) -> dict[str, int]:
    """Per claim of the namespace holding the device: the memory (MiB) its allocation consumes of it."""
    found = {}
    device = gpu.device.id
    for claim in subject.resource.list_namespaced_resource_claim(namespace).items:
        allocation = claim.status.allocation if claim.status else None
        for r in (allocation.devices.results if allocation else None) or []:
            if (r.driver, r.pool, r.device) == (device.driver, device.pool, device.device):
                amount = (r.consumed_capacity or {}).get(MEMORY)
                found[claim.metadata.name] = int(parse_quantity(amount)) // MIB if amount is not None else -1
    return found


def shared_capacity(subject: Subject, evidence: Evidence) -> None:
    gpu = shared_gpu(subject, Inventory.from_slices(subject.slices()))
    where = f"{gpu.device.node}/{gpu.device.id.device}"
    sizes = [int(gpu.real_mib * share) for share in (FIRST, SECOND, THIRD)]
    evidence.write("device.json", {"device": where, "real memory MiB": gpu.real_mib,
                                   "published memory": str(gpu.device.capacity_of(MEMORY)), "claims MiB": sizes})
    namespace = subject.namespace()
    seen: dict = {}

    def within(label: str) -> dict[str, int]:
        consumed = seen[f"consumed {label}"] = _consumed(subject, namespace, gpu)
        if any(v < 0 for v in consumed.values()):
            raise CheckFailed(f"{label}: an allocation of {where} records no consumed memory: {consumed}")
        if sum(consumed.values()) > gpu.real_mib:
            raise CheckFailed(f"{label}: claims on {where} consume {sum(consumed.values())} MiB of its {gpu.real_mib} MiB: {consumed}")
        return consumed

    try:
        held = []
        for label, mib in (("first", sizes[0]), ("second", sizes[1])):
            probe = seen[label] = probes.run(subject, namespace, [_asking(gpu, "gpu", mib)], gpu.device.node)
            if not probe.scheduled or probe.devices() != [(gpu.device.id.pool, gpu.device.id.device)]:
                raise CheckFailed(f"the {label} claim asking {mib} MiB of {where} ({gpu.real_mib} MiB) got {probe.devices() or probe.message!r}")
            held.append(probe)
        consumed = within("two claims")
        if len(consumed) != 2 or any(got < asked for got, asked in zip(sorted(consumed.values()), sorted(sizes[:2]))):
            raise CheckFailed(f"two claims asking {sizes[0]} and {sizes[1]} MiB of {where} consume {consumed}")  # a step may round up, never down
        third = seen["third"] = probes.run(subject, namespace, [_asking(gpu, "gpu", sizes[2])], gpu.device.node)
        if third.scheduled:
            within("three claims")  # fails: the device's real memory is overcommitted
            raise CheckFailed(f"a third claim asking {sizes[2]} MiB was allocated beside {sizes[0]} and {sizes[1]} MiB on {where} ({gpu.real_mib} MiB)")
        probes.delete(subject, namespace, held[0].pod)
        reused = probes.wait_any_scheduled(subject, namespace, [third.pod])
        seen["after release"] = reused.as_dict() if reused else None
        if reused is None:
            raise CheckFailed(f"after the first claim released {sizes[0]} MiB of {where}, the waiting claim asking {sizes[2]} MiB was not allocated within 30 s")
        within("after release")
    finally:
        evidence.write("probes.json", {k: v.as_dict() if isinstance(v, probes.Probe) else v for k, v in seen.items()})
        subject.drop_namespace(namespace)
