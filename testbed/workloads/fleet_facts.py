"""Hardware evolution's checks: the published slices against the fleet as it really is now.

Pure functions of an inventory (what the scheduler sees), the nodes' hardware (what each machine really
holds, from its labels and the catalog) and the MIG instances its NVML holds. A node's slices must
describe its current boards and mode, no node that left may keep a slice, every allocated device must be
published on its node (a claim on vanished hardware is stranded), and a partitionable node must hold no
MIG instance that no allocation accounts for (a leak).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Iterable, Mapping

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import parse_device_name
from fake_gpus.machine.provision import usable_layouts
from fake_gpus.node import NodeHardware
from testbed.workloads.devices import Device, DeviceId, Inventory
from testbed.workloads.oracle import Result, Violation
from testbed.workloads.truth import true_device

PROPERTY = "evolution"
Instance = tuple[int, int, int]  # (GPU minor, GPU-instance profile id, start): a MIG instance's place


def _v(message: str, expected=None, observed=None) -> Violation:
    return Violation(PROPERTY, message, expected, observed)


def node_facts(inventory: Inventory, node: str, hardware: NodeHardware, driver: str) -> list[Violation]:
    """The node's devices are its boards in its mode: its GPU count, product, memory, and the devices the
    mode publishes (whole GPUs; the layout's MIG devices; partitionable GPUs with counters)."""
    board = get_board(hardware.board)
    devices = [d for d in inventory.on_node(node) if d.driver == driver]
    if not devices:
        return [_v(f"node {node} ({hardware.count} x {board.key}, {hardware.mode}) has no published device")]
    problems = []
    minors: dict[int, list[Device]] = defaultdict(list)
    for device in devices:
        try:
            minors[parse_device_name(device.id.device).minor].append(device)
        except ValueError:
            problems.append(_v(f"node {node}: device {device.id.device} is not named as this driver names devices"))
        if device.attribute("productName") != board.product_name:
            problems.append(_v(f"node {node}: device {device.id.device} is a {device.attribute('productName')}, the node holds {board.product_name}",
                               board.product_name, device.attribute("productName")))
        elif true_device(device).capacity != device.capacity:
            problems.append(_v(f"node {node}: device {device.id.device} publishes a memory its board does not have",
                               str(true_device(device).capacity_of("memory")), str(device.capacity_of("memory"))))
    if len(minors) != hardware.count:
        problems.append(_v(f"node {node}: its slices show {len(minors)} GPUs, it holds {hardware.count} x {board.key}", hardware.count, len(minors)))
    kind = hardware.mode.kind
    for minor, held in sorted(minors.items()):
        full = [d for d in held if d.attribute("type") == "gpu"]
        migs = [d for d in held if d.attribute("type") == "mig"]
        where = f"node {node} GPU {minor} ({kind})"
        if kind == "whole" and (migs or any(d.consumes for d in full) or len(full) != 1):
            problems.append(_v(f"{where}: expected one whole GPU and nothing else", "1 whole GPU",
                               sorted(d.id.device for d in held)))
        elif kind == "static-mig":
            wanted = Counter(usable_layouts(board)[hardware.mode.mig_layout])
            have = Counter(str(d.attribute("profile")) for d in migs)
            if full or have != wanted:
                problems.append(_v(f"{where}: expected the MIG devices of layout {hardware.mode.mig_layout}",
                                   dict(wanted), {**dict(have), **({"whole GPU": len(full)} if full else {})}))
        elif kind == "dynamic-mig" and (len(full) != 1 or not full[0].consumes or not migs):
            problems.append(_v(f"{where}: expected a partitionable GPU (consuming its counter set) and its MIG devices",
                               "partitionable", sorted(d.id.device for d in held)))
    return problems


def fleet_facts(inventory: Inventory, fleet: Mapping[str, NodeHardware], driver: str) -> list[Violation]:
    """Every node of the fleet published as it is; no slice left of a node that is gone."""
    problems = []
    for node in sorted({d.node for d in inventory.devices.values() if d.driver == driver and d.node} - set(fleet)):
        problems.append(_v(f"node {node} is gone but its devices are still published (slices of removed hardware)", "no slice", node))
    for node, hardware in sorted(fleet.items()):
        problems += node_facts(inventory, node, hardware, driver)
    return problems


def stranded(inventory: Inventory, allocations: Iterable[tuple[str, str | None, list[Result]]]) -> list[Violation]:
    """Every allocated device is published, on the node its claim is allocated on."""
    problems = []
    for owner, node, results in allocations:
        for result in results:
            device = inventory.devices.get(result.device)
            if device is None:
                problems.append(_v(f"claim {owner} holds {result.device}, which no current slice publishes (stranded)", "published", str(result.device)))
            elif node and device.node != node:
                problems.append(_v(f"claim {owner} is allocated on {node} but {result.device} is published for {device.node}", node, device.node))
    return problems


def leaked(node: str, instances: set[Instance], held: Iterable[DeviceId]) -> list[Violation]:
    """MIG instances on a partitionable node that no allocated device accounts for."""
    accounted: set[Instance] = set()
    for device in held:
        try:
            ref = parse_device_name(device.device)
        except ValueError:
            continue
        if ref.is_mig:
            accounted.add((ref.minor, ref.profile_id, ref.start))
    extra = sorted(instances - accounted)
    if not extra:
        return []
    return [_v(f"node {node}: MIG instances {extra} (GPU minor, profile id, start) exist in NVML but no claim holds them (leaked)",
               sorted(accounted & instances), sorted(instances))]
