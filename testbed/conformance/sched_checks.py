"""Scheduling on the driver's slices: the real scheduler allocates what the claims ask, from what is published.

Each probe picks its node from the published devices (a node of whole GPUs, a partitionable GPU), so
it runs on any cluster; on a shared cluster other workloads' claims may hold devices, which the
probes do not take into account (run them on an idle cluster or node pool).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from testbed.conformance import probes
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.subject import Subject
from testbed.workloads.devices import Device, Inventory
from testbed.workloads.truth import board_of

MIB = 2**20


@dataclass
class WholeNode:
    """A node with whole (non-partitionable) GPUs of one product, and that product's real memory."""

    name: str
    product: str
    memory_mib: int
    devices: list[str]


def whole_node(subject: Subject, inventory: Inventory) -> WholeNode:
    """The node with the most whole GPUs of one product (ties: by name)."""
    groups: dict[tuple[str, str], list[Device]] = defaultdict(list)
    for d in inventory.devices.values():
        if d.node and d.attribute("type") == "gpu" and not d.consumes and d.capacity_of("memory") is not None:
            groups[(d.node, str(d.attribute("productName")))].append(d)
    if not groups:
        raise NotRun("no node publishes whole GPUs")
    (node, product), devices = max(groups.items(), key=lambda kv: (len(kv[1]), kv[0]))
    board = board_of(devices[0])
    # the product's memory as NVML reports it (NVIDIA's tables), so a driver overstating it is caught
    memory = board.memory_mib if board else min(int(d.capacity_of("memory")) for d in devices) // MIB
    return WholeNode(node, product, memory, sorted(d.id.device for d in devices))


def _attr(subject: Subject, name: str) -> str:
    return f"device.attributes['{subject.driver}'].{name}"


def _memory_at_least(subject: Subject, mib: int) -> str:
    return f"device.capacity['{subject.driver}'].memory.compareTo(quantity('{mib}Mi')) >= 0"


def _in_namespace(subject: Subject, evidence: Evidence, body) -> None:
    namespace = subject.namespace()
    seen: dict = {}
    try:
        body(namespace, seen)
    finally:
        evidence.write("probes.json", {k: v.as_dict() if isinstance(v, probes.Probe) else v for k, v in seen.items()})
        subject.drop_namespace(namespace)


def exact(subject: Subject, evidence: Evidence) -> None:
    node = whole_node(subject, Inventory.from_slices(subject.slices()))
    product = f"{_attr(subject, 'productName')} == '{node.product}'"
    fits = f"{product} && {_memory_at_least(subject, node.memory_mib)}"

    def body(ns: str, seen: dict) -> None:
        for count in sorted({1, min(2, len(node.devices))}):
            probe = seen[f"count {count}"] = probes.run(subject, ns, [probes.exactly("gpu", subject.gpu_class, fits, count)], node.name)
            got = probe.devices()
            if not probe.scheduled or len(got) != count or len(set(got)) != count or any(d not in node.devices for _, d in got):
                raise CheckFailed(f"{count} x {node.product} with >= {node.memory_mib} MiB on {node.name}: got {got or probe.message!r}")
            probes.delete(subject, ns, probe.pod)
        too_many = len(node.devices) + 1
        for label, request in ((f"count {too_many}", probes.exactly("gpu", subject.gpu_class, product, too_many)),
                               ("more memory", probes.exactly("gpu", subject.gpu_class, _memory_at_least(subject, node.memory_mib + 1)))):
            probe = seen[label] = probes.run(subject, ns, [request], node.name)
            if probe.scheduled:
                raise CheckFailed(f"{label} than node {node.name} has ({len(node.devices)} x {node.memory_mib} MiB) was allocated: {probe.devices()}")

    _in_namespace(subject, evidence, body)


def first_available(subject: Subject, evidence: Evidence) -> None:
    node = whole_node(subject, Inventory.from_slices(subject.slices()))
    product = f"{_attr(subject, 'productName')} == '{node.product}'"

    def body(ns: str, seen: dict) -> None:
        cases = {
            "bigger first": (probes.exactly("big", subject.gpu_class, _memory_at_least(subject, node.memory_mib + 1)),
                             probes.exactly("fits", subject.gpu_class, _memory_at_least(subject, node.memory_mib))),
            "more first": (probes.exactly("many", subject.gpu_class, product, len(node.devices) + 1),
                           probes.exactly("fits", subject.gpu_class, product, 1)),
        }
        for label, alternatives in cases.items():
            probe = seen[label] = probes.run(subject, ns, [probes.first_available("gpu", *alternatives)], node.name)
            requests = sorted({r["request"] for r in probe.results})
            if requests != ["gpu/fits"]:
                raise CheckFailed(f"firstAvailable ({label}) on {node.name}: allocated {requests or probe.message!r}, expected gpu/fits")
            probes.delete(subject, ns, probe.pod)

    _in_namespace(subject, evidence, body)


def all_devices(subject: Subject, evidence: Evidence) -> None:
    node = whole_node(subject, Inventory.from_slices(subject.slices()))

    def body(ns: str, seen: dict) -> None:
        request = probes.exactly("gpu", subject.gpu_class, f"{_attr(subject, 'productName')} == '{node.product}'", all_devices=True)
        probe = seen["all"] = probes.run(subject, ns, [request], node.name)
        got = sorted(d for _, d in probe.devices())
        if got != node.devices:
            raise CheckFailed(f"allocationMode All of {node.product} on {node.name}: got {got or probe.message!r}, published {node.devices}")

    _in_namespace(subject, evidence, body)


@dataclass
class PartitionableGpu:
    node: str
    uuid: str
    largest: str  # profile names
    smallest: str


def partitionable_gpu(subject: Subject, inventory: Inventory) -> PartitionableGpu:
    """A partitionable GPU: the full GPU and the MIG devices consuming one counter set; its node, UUID and
    its largest and smallest profiles."""
    by_set: dict = defaultdict(list)
    for d in inventory.devices.values():
        for set_id, _ in d.consumes:
            by_set[set_id].append(d)
    candidates = []
    for set_id, devices in sorted(by_set.items(), key=lambda kv: str(kv[0])):
        full = [d for d in devices if d.attribute("type") == "gpu" and d.attribute("uuid") and d.node]
        migs = sorted((d for d in devices if d.attribute("type") == "mig" and d.attribute("profile")),
                      key=lambda d: d.capacity_of("memory") or 0)
        if full and migs:
            candidates.append(PartitionableGpu(full[0].node, str(full[0].attribute("uuid")),
                                               str(migs[-1].attribute("profile")), str(migs[0].attribute("profile"))))
    if not candidates:
        raise NotRun("no partitionable GPU (a full GPU and MIG devices consuming one counter set) is published")
    return candidates[0]


def match_attribute(subject: Subject, evidence: Evidence) -> None:
    inventory = Inventory.from_slices(subject.slices())
    gpu = partitionable_gpu(subject, inventory)

    def body(ns: str, seen: dict) -> None:
        small = f"{_attr(subject, 'profile')} == '{gpu.smallest}'"
        requests = [probes.exactly("a", subject.mig_class, small), probes.exactly("b", subject.mig_class, small)]
        constraint = [{"requests": ["a", "b"], "matchAttribute": f"{subject.driver}/parentUUID"}]
        probe = seen["same parent"] = probes.run(subject, ns, requests, gpu.node, constraint)
        if not probe.scheduled:
            raise CheckFailed(f"two {gpu.smallest} partitions with matchAttribute parentUUID on {gpu.node} stay pending: {probe.message}")
        parents = {inventory.devices[next(i for i in inventory.devices if (i.pool, i.device) == dev)].attribute("parentUUID")
                   for dev in probe.devices()}
        if len(parents) != 1:
            raise CheckFailed(f"matchAttribute parentUUID gave devices of {len(parents)} GPUs: {probe.devices()}")

    _in_namespace(subject, evidence, body)


def partitions(subject: Subject, evidence: Evidence) -> None:
    gpu = partitionable_gpu(subject, Inventory.from_slices(subject.slices()))
    on_gpu = f"{_attr(subject, 'parentUUID')} == '{gpu.uuid}'"
    whole = probes.exactly("gpu", subject.gpu_class, f"{_attr(subject, 'uuid')} == '{gpu.uuid}'")
    small = probes.exactly("gpu", subject.mig_class, f"{on_gpu} && {_attr(subject, 'profile')} == '{gpu.smallest}'")

    def body(ns: str, seen: dict) -> None:
        big = seen["largest"] = probes.run(subject, ns, [probes.exactly("gpu", subject.mig_class, f"{on_gpu} && {_attr(subject, 'profile')} == '{gpu.largest}'")], gpu.node)
        if not big.scheduled:
            raise CheckFailed(f"a {gpu.largest} partition of an idle GPU on {gpu.node} stays pending: {big.message}")
        waiting = {}
        for label, request in (("full GPU", whole), (gpu.smallest, small)):
            probe = seen[f"{label} while {gpu.largest} held"] = probes.run(subject, ns, [request], gpu.node)
            if probe.scheduled:
                raise CheckFailed(f"{label} allocated ({probe.devices()}) while {gpu.largest} holds the whole GPU {gpu.uuid}")
            waiting[label] = probe.pod
        probes.delete(subject, ns, big.pod)
        freed = probes.wait_any_scheduled(subject, ns, list(waiting.values()))
        seen["after release"] = freed.as_dict() if freed else None
        if freed is None:
            raise CheckFailed(f"after the {gpu.largest} partition was freed, neither the full GPU nor a {gpu.smallest} was allocated within 30 s")

    _in_namespace(subject, evidence, body)
