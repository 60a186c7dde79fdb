"""What a driver did to the hardware: each node's NVML state equals what its prepared claims say, nothing more.

The API shows what was allocated; only the node shows what the kubelet plugin then made. On a dynamic-MIG node
a prepared MIG device must be a GPU instance of its profile at the placement its device name gives (the
allocated one: a plugin that lets NVML choose puts it where NVML's first free placement is, which the scheduler
believes taken by nobody), with its compute instance; once unprepared it must be gone. Compute mode and time
slice are the defaults unless a prepared claim's GpuConfig asks otherwise (testbed/workloads/physical.py, the
judge the property machines use). The probe prepares two claims for the smallest plain MIG profile on one
partitionable GPU, one after the other, so each instance's placement is the scheduler's choice and not NVML's;
then every node whose NVML is local is judged with them held, and again once they are gone.
"""

from __future__ import annotations

from testbed.conformance import probes
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.strategy_checks import _prepared
from testbed.conformance.subject import Subject
from testbed.workloads.devices import Device, Inventory
from testbed.workloads.physical_watch import PhysicalCheck

# seconds for NVML to agree once every prepare and unprepare was answered (the stand-in unprepares a gone pod's
# claims in its next round)
SETTLE = 30.0


def _smallest_partition(subject: Subject, inventory: Inventory) -> Device:
    """A MIG device of the smallest plain profile on a dynamic-MIG node of the layout (else any node with
    partitionable devices): least memory, and of those the shortest profile name, since NVIDIA's extended
    variants (+me, +gfx) add a suffix and allow one instance per GPU, so two claims of them cannot both fit."""
    dynamic = {n.name for n in subject.layout.nodes if n.mode.kind == "dynamic-mig"} if subject.layout else set()
    partitions = [d for d in inventory.devices.values() if d.attribute("type") == "mig" and d.consumes and d.node
                  and d.attribute("profile") and (d.node in dynamic or not dynamic)]
    if not partitions:
        raise NotRun("no dynamic-MIG node publishes MIG devices consuming counters")
    return min(partitions, key=lambda d: (d.node not in dynamic, d.node, d.capacity_of("memory") or 0,
                                          len(str(d.attribute("profile"))), d.id.device))


def _judge(check: PhysicalCheck, when: str, seen: dict) -> None:
    problems = check()
    seen[when] = [p.message for p in problems]
    if problems:
        raise CheckFailed(f"{when}: {problems[0].message}" + (f" (and {len(problems) - 1} more)" if len(problems) > 1 else ""))


def nvml_state(subject: Subject, evidence: Evidence) -> None:
    if subject.node_nvml is None:
        raise NotRun("needs the nodes' NVML (a KWOK bed of the suite's own)")
    partition = _smallest_partition(subject, Inventory.from_slices(subject.slices()))
    node, profile = partition.node, str(partition.attribute("profile"))
    assert node is not None
    if subject.serve_node is not None:  # our driver on KWOK: the node's plugin joins the stand-in kubelet now
        subject.serve_node(node)
    check = PhysicalCheck(subject.api, subject.node_nvml, subject.driver, bound=SETTLE)
    request = probes.exactly("mig", subject.mig_class, f"device.attributes['{subject.driver}'].profile == '{profile}'")
    namespace = subject.namespace()
    seen: dict = {"node": node, "profile": profile}
    try:
        for label in ("first", "second"):
            probe = probes.run(subject, namespace, [request], node)
            seen[label] = probe.as_dict()
            if not probe.scheduled:
                raise CheckFailed(f"the {label} claim for a {profile} partition on {node} stays pending: {probe.message}")
            _prepared(subject, namespace, probe.pod, f"for a {profile} partition")
        _judge(check, "with both claims prepared", seen)
        for label in ("first", "second"):
            probes.delete(subject, namespace, seen[label]["pod"])
        _judge(check, "after both claims were unprepared", seen)
    finally:
        seen["judge cost ms"] = check.stats.get("physical-ms")
        evidence.write("nvml-state.json", seen)
        subject.drop_namespace(namespace)
