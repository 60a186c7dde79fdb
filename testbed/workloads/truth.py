"""What the hardware really is, from the catalog: the check on the slices themselves.

The oracle trusts the published slices, as the scheduler does; a publisher that lies (twice the
memory, counters too large, a placement one slice short) makes both agree on a wrong answer. These
checks compare allocations with the board's real facts instead: a device's true memory, and that the
partitions allocated on one GPU are physically disjoint (memory slices from the device name's
placement, the full GPU excluding every partition) and fit its compute slices.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace
from decimal import Decimal
from functools import lru_cache
from typing import Sequence

from fake_gpus.catalog import Board, CatalogError, all_boards
from fake_gpus.catalog import COMPUTE_SLICES as CATALOG_COMPUTE_SLICES
from fake_gpus.driver.identity import parse_device_name, profile_token
from testbed.workloads.devices import Device, DeviceId, Inventory
from testbed.workloads.oracle import Result, Violation

MIB = Decimal(2**20)


@lru_cache(maxsize=None)
def _boards_by_product() -> dict[str, Board]:
    return {b.product_name: b for b in all_boards()}


def board_of(device: Device) -> Board | None:
    product = device.attribute("productName")
    return _boards_by_product().get(product) if isinstance(product, str) else None


def _profile(board: Board, device: Device):
    name = device.attribute("profile")
    if isinstance(name, str):
        try:
            return board.profile(name)
        except CatalogError:
            return None
    return None


def true_device(device: Device) -> Device:
    """`device` with its memory capacity and architecture as the catalog says (unchanged when the board is unknown)."""
    board = board_of(device)
    if board is None:
        return device
    if board.dra_architecture:  # what a selector on `architecture` means, whatever the driver calls it
        device = replace(device, attributes={**device.attributes, f"{device.driver}/architecture": board.dra_architecture})
    if device.attribute("type") == "mig":
        profile = _profile(board, device)
        mib = profile.memory_mib if profile else None
    elif device.consumes:
        # a partitionable full GPU holds what the full-GPU MIG profile holds (NVIDIA's driver states that memory)
        full = [p.memory_mib for p in board.gpu_instance_profiles if p.memory_slices == board.memory_slices and p.memory_mib]
        mib = max(full) if full else board.memory_mib
    else:
        mib = board.memory_mib
    if mib is None:
        return device
    capacity = dict(device.capacity)
    capacity[f"{device.driver}/memory"] = Decimal(mib) * MIB
    return replace(device, capacity=capacity)


def physical_violations(inventory: Inventory, allocations: Sequence[tuple[str, Sequence[Result]]]) -> list[Violation]:
    """Partitions held at the same time on one GPU must be disjoint and fit the board."""
    per_gpu: dict[tuple[str, str, int], list[tuple[str, Device]]] = defaultdict(list)
    for owner, results in allocations:
        for result in results:
            device = inventory.devices.get(result.device)
            if device is None or result.admin:
                continue
            try:
                ref = parse_device_name(device.id.device)
            except ValueError:
                continue  # not a device of this driver's naming
            per_gpu[(device.id.driver, device.id.pool, ref.minor)].append((owner, device))
    problems = []
    for (driver, pool, minor), held in per_gpu.items():
        where = f"{driver}/{pool} GPU {minor}"
        whole = [o for o, d in held if not parse_device_name(d.id.device).is_mig]
        # a shared MIG device is one partition, however many claims hold shares of it
        parts = list({d.id: (o, d) for o, d in held if parse_device_name(d.id.device).is_mig}.values())
        if whole and parts:
            problems.append(Violation("soundness", f"{where}: the full GPU and MIG partitions are allocated together",
                                      "full GPU alone", sorted(str(d.id) for _, d in held), double=True))
        used: dict[int, str] = {}
        compute, limit = 0, CATALOG_COMPUTE_SLICES
        for owner, device in parts:
            ref = parse_device_name(device.id.device)
            board = board_of(device)
            profile = _profile(board, device) if board else None
            size = profile.memory_slices if profile and profile.memory_slices else 1  # names carry the start only
            for memory_slice in range(ref.start, ref.start + size):
                if memory_slice in used:
                    problems.append(Violation("soundness", f"{where}: memory slice {memory_slice} held by two partitions",
                                              "disjoint placements", [used[memory_slice], str(device.id)], double=True))
                used[memory_slice] = str(device.id)
            compute += profile.slice_count if profile else 0
            limit = board.compute_slices if board else limit  # an A30 has 4, the others 7
        if compute > limit:
            problems.append(Violation("soundness", f"{where}: partitions use {compute} compute slices of {limit}",
                                      limit, compute, double=True))
    return problems


def placement_matches_name(device: Device) -> bool:
    """A MIG device's name token is its catalog profile (guards the parsing the checks rely on)."""
    board = board_of(device)
    profile = _profile(board, device) if board else None
    if profile is None:
        return True
    ref = parse_device_name(device.id.device)
    return ref.profile_token == profile_token(profile.name) and ref.profile_id == profile.id


def held_devices(allocations: Sequence[tuple[str, Sequence[Result]]]) -> set[DeviceId]:
    return {r.device for _, results in allocations for r in results if not r.admin}


def shared_memory_violations(inventory: Inventory, allocations: Sequence[tuple[str, Sequence[Result]]]) -> list[Violation]:
    """Shared devices against the board's real memory: no request policy of theirs lets one claim take more
    (default, maximum, valid values), and the shares held at once never add up to more."""
    problems = []
    held: dict[DeviceId, Decimal] = defaultdict(Decimal)
    for _owner, results in allocations:
        for result in results:
            device = inventory.devices.get(result.device)
            if device is not None and result.share_id is not None:
                held[device.id] += dict(result.consumed).get(f"{device.driver}/memory", Decimal(0))
    for device in inventory.devices.values():
        if not device.allow_multiple:
            continue
        real = true_device(device).capacity_of("memory")
        policy = device.policies.get(f"{device.driver}/memory")
        if real is None:
            continue
        bounds = [b for b in ((policy.default, policy.maximum) + policy.valid_values if policy else ()) if b is not None]
        if any(b > real for b in bounds):
            problems.append(Violation("soundness", f"{device.id}: its memory request policy lets one claim take {max(bounds)}, "
                                      f"the board has {real}", str(real), str(max(bounds))))
        if held.get(device.id, Decimal(0)) > real:
            problems.append(Violation("soundness", f"{device.id}: shares hold {held[device.id]} of memory, the board has {real}",
                                      str(real), str(held[device.id]), double=True))
    return problems
