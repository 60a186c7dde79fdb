"""ResourceSlices (resource.k8s.io/v1) for one node, built from its NVML inventory.

Modes: `whole` and `static-mig:<layout>` publish the devices that exist (whole GPUs, or the MIG devices
of GPUs with MIG on); `dynamic-mig` publishes partitionable devices: one counter set per GPU, the full
GPU and every profile x placement consuming counters, each GPU in slices of its own, where NVIDIA's driver
offers them (fake_gpus.driver.dynamic_offer: whole only without MIG or on Ampere with MIG mode off, no full
GPU on Ampere with MIG mode on). Slices are split so that every API limit of the
served Kubernetes minor holds (`ApiLimits`, read off k8s.io/api resource/v1 types.go and
pkg/apis/resource/validation of each release).
"""

from __future__ import annotations

import functools
import os
import uuid as uuid_module
from dataclasses import dataclass, field
from typing import Iterable

from fake_gpus.driver.identity import (
    CAPACITY_COUNTERS,
    DriverIdentity,
    counter_set_name,
    cuda_version,
    gpu_device_name,
    memory_slice_counter,
    mig_device_name,
    semver,
)
from fake_gpus.driver.consumable_shares import apply_consumable_shares, shared_counter_set
from fake_gpus.driver.faults import declared_slices
from fake_gpus.driver.pci import sysfs_address
from fake_gpus.driver.nvml_adapter import Gpu, MigProfile, NodeInventory, Placement
from fake_gpus.node import Mode

MANAGED_BY = {"app.kubernetes.io/managed-by": "dra-testbed"}

# Kubernetes 1.37's alpha DRADeviceCompatibilityGroups, opt-in only: NVIDIA's driver publishes no groups, and
# by default our slices stay byte-for-byte what it publishes (testbed/drivers/nvidia/parity.py).
COMPATIBILITY_GROUPS_ENV = "DRA_TESTBED_COMPATIBILITY_GROUPS"
WHOLE_GPU_GROUP, MIG_GROUP = "whole-gpu", "mig"


def compatibility_groups_on(environ: dict[str, str] | None = None) -> bool:
    """Whether this process publishes compatibility groups ($DRA_TESTBED_COMPATIBILITY_GROUPS=1)."""
    return (os.environ if environ is None else environ).get(COMPATIBILITY_GROUPS_ENV, "") == "1"


# DRAListTypeAttributes (Kubernetes alpha since 1.36; NVIDIA's driver has a gate of the same name, off by
# default): opt-in as there, since a server without the gate does not take list values
LIST_ATTRIBUTES_ENV = "DRA_TESTBED_LIST_ATTRIBUTES"


def list_attributes_on(environ: dict[str, str] | None = None) -> bool:
    """Whether this process publishes list-type attributes ($DRA_TESTBED_LIST_ATTRIBUTES=1)."""
    return (os.environ if environ is None else environ).get(LIST_ATTRIBUTES_ENV, "") == "1"


class SliceLimitError(ValueError):
    """Devices that no split into slices can publish under the served API's limits."""


# --------------------------------------------------------------------------- API limits per minor


@dataclass(frozen=True)
class ApiLimits:
    """Size limits of a ResourceSlice in one served API version (None: no such limit)."""

    separate_counter_slices: bool  # 1.35+: sharedCounters and devices never share a slice
    max_devices: int
    max_devices_consuming: int  # when any device of the slice consumes counters
    max_counters_per_slice: int | None  # 1.34: counters summed over all sets of a slice
    max_counter_sets: int | None  # 1.35+: sets per slice
    max_counters_per_set: int
    max_device_counters_per_slice: int | None  # 1.34: consumed counters summed over the slice's devices
    max_counters_per_device: int  # 1.34: over all entries of a device; 1.35+: per entry
    max_consumptions_per_device: int | None  # 1.35+: consumesCounters entries of a device
    max_attributes_and_capacities: int = 32
    taint_effect_none: bool = True  # 1.35+: a device taint may have effect None (1.34 knows NoSchedule, NoExecute)


# k8s.io/api v0.34 resource/v1: ResourceSliceMaxDevices 128, ResourceSliceMaxSharedCounters 32 (all sets),
# ResourceSliceMaxCountersPerDevice 32, ResourceSliceMaxDeviceCountersPerSlice 1024; counters and the
# devices consuming them must sit in one slice (validateDevice looks counter sets up in its own slice).
# A taint of effect None is refused there ("supported values: NoExecute, NoSchedule", seen on 1.34.4).
LIMITS_1_34 = ApiLimits(False, 128, 128, 32, None, 32, 1024, 32, None, taint_effect_none=False)
# v0.35+: ResourceSliceMaxCounterSets 8, ResourceSliceMaxCountersPerCounterSet 32,
# ResourceSliceMaxDevicesWithTaintsOrConsumesCounters 64, ResourceSliceMaxDeviceCounterConsumptionsPerDevice 2,
# ResourceSliceMaxCountersPerDeviceCounterConsumption 32; "only one of sharedCounters or devices".
LIMITS_1_35 = ApiLimits(True, 128, 64, None, 8, 32, None, 32, 2)


def api_limits(minor: str) -> ApiLimits:
    """Limits of the resource.k8s.io/v1 API served by Kubernetes `minor` ("1.34", "1.35", ...)."""
    major, _, rest = minor.removeprefix("v").partition(".")
    number = int("".join(c for c in rest.split(".")[0] if c.isdigit()) or 0)
    if (int(major), number) < (1, 34):
        raise ValueError(f"Kubernetes {minor} does not serve resource.k8s.io/v1; the driver needs 1.34 or newer")
    return LIMITS_1_34 if number == 34 and major == "1" else LIMITS_1_35


def server_minor(version_info) -> str:
    """"1.35" from a VersionApi().get_code() answer (minor may read "35+" on some distributions)."""
    return f"{version_info.major}.{''.join(c for c in version_info.minor if c.isdigit())}"


# --------------------------------------------------------------------------- devices


def _attributes(gpu: Gpu, inv: NodeInventory, driver: str, faults: frozenset[str] = frozenset()) -> dict:
    """Product attributes every device of this GPU carries (NVIDIA's names)."""
    major, minor = gpu.cuda_compute_capability
    attributes = {
        "productName": {"string": gpu.product_name},
        "brand": {"string": gpu.brand},
        ("arch" if "renamed-attribute" in faults else "architecture"): {"string": gpu.architecture},
        "cudaComputeCapability": {"version": f"{major}.{minor}.0"},
        "driverVersion": {"version": semver(inv.driver_version)},
        "cudaDriverVersion": {"version": cuda_version(inv.cuda_driver_version)},
        "resource.kubernetes.io/pciBusID": {"string": sysfs_address(gpu.pci_bus_id)},
    }
    # read from sysfs as NVIDIA's driver does; left out where the node's sysfs does not say
    if gpu.pcie_root:
        attributes["resource.kubernetes.io/pcieRoot"] = {"string": gpu.pcie_root}
    if gpu.numa_node is not None:
        # as NVIDIA's driver with its DRAListTypeAttributes gate on: the NUMA node as a one-element list
        value = {"ints": [gpu.numa_node]} if list_attributes_on() else {"int": gpu.numa_node}
        attributes["resource.kubernetes.io/numaNode"] = value
    return attributes


WRONG_MEMORY_FACTOR = 2  # how many times its real memory a whole GPU publishes under the wrong-memory fault


def whole_gpu_device(gpu: Gpu, inv: NodeInventory, driver: str, faults: frozenset[str] = frozenset()) -> dict:
    """`gpu-<minor>` with its memory capacity."""
    memory = gpu.memory_mib * (WRONG_MEMORY_FACTOR if "wrong-memory" in faults else 1)
    return {
        "name": gpu_device_name(gpu.minor),
        "attributes": {"type": {"string": "gpu"}, "uuid": {"string": gpu.uuid}, **_attributes(gpu, inv, driver, faults)},
        "capacity": {"memory": {"value": mebibytes(memory)}},
    }


def _profile_values(profile: MigProfile) -> dict[str, int]:
    """A profile's capacities in NVIDIA's capacity names (memory in MiB)."""
    return {
        "multiprocessors": profile.multiprocessors, "copyEngines": profile.copy_engines, "decoders": profile.decoders,
        "encoders": profile.encoders, "jpegEngines": profile.jpeg_engines, "ofaEngines": profile.ofa_engines,
        "memory": profile.memory_mib,
    }


def mebibytes(value: int) -> str:
    """`value` MiB as the API server writes the quantity back (canonical binary SI: 16384 MiB is "16Gi"),
    so what we publish reads back unchanged and matches NVIDIA's driver, which publishes bytes."""
    if value == 0:
        return "0"
    suffixes, exponent = ("Mi", "Gi", "Ti", "Pi", "Ei"), 0
    while value % 1024 == 0 and exponent < len(suffixes) - 1:
        value //= 1024
        exponent += 1
    return f"{value}{suffixes[exponent]}"


def _quantity(capacity: str, value: int) -> str:
    return mebibytes(value) if capacity == "memory" else str(value)


def mig_device(gpu: Gpu, inv: NodeInventory, driver: str, profile: MigProfile, placement: Placement,
               uuid: str | None = None, faults: frozenset[str] = frozenset()) -> dict:
    """A MIG device of `profile` at `placement`; `uuid` only for a MIG device that exists."""
    name = mig_device_name(gpu.minor, profile.name, profile.id, placement.start)
    parent = f"GPU-{uuid_module.uuid5(uuid_module.NAMESPACE_URL, gpu.uuid + name)}" if "parent-uuid-unstable" in faults and not uuid else gpu.uuid
    shown = f"MIG {profile.name}" if "mig-profile-names" in faults else profile.name
    attributes = {"type": {"string": "mig"}, "parentUUID": {"string": parent}, "profile": {"string": shown}}
    if uuid:
        attributes["uuid"] = {"string": uuid}
        if "oversized-attribute" in faults:
            attributes["placement"] = {"string": f"{profile.name} at memory slices {placement.start}..{placement.start + placement.size - 1} of {gpu.uuid}"}
    return {
        "name": name,
        "attributes": {**attributes, **_attributes(gpu, inv, driver, faults)},
        "capacity": {k: {"value": _quantity(k, v)} for k, v in _profile_values(profile).items()},
    }


# --------------------------------------------------------------------------- counters (dynamic MIG)


@functools.lru_cache(maxsize=64)
def counter_totals(profiles: tuple[MigProfile, ...]) -> dict[str, int]:
    """Engine and memory counters of a GPU, keyed by capacity name: each the most any one profile has.

    NVML has no whole-GPU engine counts. NVIDIA's driver takes the per-capacity maximum over the MIG
    profiles (its nvlib.go), which is the whole-GPU profile's row on every board (132 SMs on an H100). On
    an RTX PRO 6000 a '+me.all' instance holds all 4 decoders: with the maximum, a plain 1g.24gb (one
    decoder) cannot be allocated beside it, where a sum over instances that fit would have offered 9."""
    totals = dict.fromkeys(CAPACITY_COUNTERS, 0)
    for p in profiles:
        for key, value in _profile_values(p).items():
            totals[key] = max(totals[key], value)
    return totals


def _counters(values: dict[str, int], slices: Iterable[int], scale: int = 1) -> dict:
    counters = {CAPACITY_COUNTERS[k]: {"value": _quantity(k, v * scale)} for k, v in values.items()}
    counters.update({memory_slice_counter(i): {"value": str(scale)} for i in slices})
    return counters


def counter_set(gpu: Gpu, faults: frozenset[str] = frozenset()) -> dict:
    """`gpu-<minor>-counter-set`: engines, memory and memory-slice-0..7."""
    scale = 2 if "oversized-counters" in faults else 1
    return {"name": counter_set_name(gpu.minor),
            "counters": _counters(counter_totals(gpu.profiles), range(gpu.memory_slices), scale)}


def partitionable_devices(gpu: Gpu, inv: NodeInventory, driver: str, faults: frozenset[str] = frozenset(),
                          full_gpu: bool = True, groups: bool = False) -> list[dict]:
    """The full GPU (unless not `full_gpu`) and every profile x placement, each consuming its share of the
    GPU's counter set; with `groups`, the full GPU and the MIG devices in disjoint compatibility groups."""
    full = whole_gpu_device(gpu, inv, driver, faults)
    # as NVIDIA's driver: the partitionable full GPU offers every engine, memory of the largest profile
    totals = counter_totals(gpu.profiles)
    full["capacity"] = {k: {"value": _quantity(k, v)} for k, v in totals.items()}
    if "wrong-memory" in faults:
        full["capacity"]["memory"] = {"value": _quantity("memory", WRONG_MEMORY_FACTOR * totals["memory"])}
    if "counters-undeclared" not in faults:
        full["consumesCounters"] = [{"counterSet": counter_set_name(gpu.minor),
                                     "counters": _counters(counter_totals(gpu.profiles), range(gpu.memory_slices))}]
    elif groups:  # the group needs a consumption entry to ride on: one that takes nothing
        full["consumesCounters"] = [{"counterSet": counter_set_name(gpu.minor), "counters": _counters({"memory": 0}, ())}]
    if groups:  # a GPU is whole or partitioned, never both: the full GPU shares no group with a MIG device
        full["consumesCounters"][0]["compatibilityGroups"] = [WHOLE_GPU_GROUP]
    devices = [full] if full_gpu else []
    for profile in gpu.profiles:
        for placement in profile.placements:
            slices = placement.slices
            if "short-placement" in faults:
                slices = range(placement.start, placement.start + placement.size - 1)
            slices = declared_slices(profile.name, slices, faults)
            device = mig_device(gpu, inv, driver, profile, placement, faults=faults)
            device["consumesCounters"] = [{"counterSet": counter_set_name(gpu.minor),
                                           "counters": _counters(_profile_values(profile), slices)}]
            if groups:
                device["consumesCounters"][0]["compatibilityGroups"] = [MIG_GROUP]
            devices.append(device)
    # NVIDIA's driver announces a GPU's devices sorted by name (byte order), the full GPU first
    return sorted(devices, key=lambda d: d["name"].encode())


def live_devices(gpu: Gpu, inv: NodeInventory, driver: str, faults: frozenset[str] = frozenset()) -> list[dict]:
    """What exists: the MIG devices of a GPU with MIG on, else the whole GPU."""
    if not gpu.mig_enabled:
        return [whole_gpu_device(gpu, inv, driver, faults)]
    devices = []
    for mig in gpu.mig_devices:
        profile = gpu.profile_by_id(mig.profile_id)
        if profile is None:
            continue  # NVML does not answer for its profile (unknown facts): nothing true to publish
        device = mig_device(gpu, inv, driver, profile, mig.placement, uuid=mig.uuid, faults=faults)
        # NVIDIA's driver offers a live MIG device's memory slices as capacities memorySlice<N> = 1
        device["capacity"].update({f"memorySlice{i}": {"value": "1"} for i in mig.placement.slices})
        devices.append(device)
    return devices


# --------------------------------------------------------------------------- splitting into slices


@dataclass
class _Slice:
    counter_sets: list[dict] = field(default_factory=list)
    devices: list[dict] = field(default_factory=list)


def _set_size(counter_set_: dict) -> int:
    return len(counter_set_["counters"])


def _device_counters(device: dict) -> int:
    return sum(len(c["counters"]) for c in device.get("consumesCounters", ()))


def check_device(device: dict, limits: ApiLimits) -> None:
    """Per-device limits: raise SliceLimitError naming the device and the limit."""
    name = device["name"]
    if len(device.get("attributes", {})) + len(device.get("capacity", {})) > limits.max_attributes_and_capacities:
        raise SliceLimitError(f"device {name}: more than {limits.max_attributes_and_capacities} attributes and capacities")
    entries = device.get("consumesCounters", ())
    if limits.max_consumptions_per_device is not None and len(entries) > limits.max_consumptions_per_device:
        raise SliceLimitError(f"device {name}: more than {limits.max_consumptions_per_device} consumesCounters entries")
    per_device = [len(e["counters"]) for e in entries] if limits.separate_counter_slices else [_device_counters(device)]
    if any(n > limits.max_counters_per_device for n in per_device):
        raise SliceLimitError(f"device {name}: consumes more than {limits.max_counters_per_device} counters")


def _fits(s: _Slice, sets: list[dict], devices: list[dict], limits: ApiLimits) -> bool:
    all_sets, all_devices = s.counter_sets + sets, s.devices + devices
    consuming = any("consumesCounters" in d for d in all_devices)
    if len(all_devices) > (limits.max_devices_consuming if consuming else limits.max_devices):
        return False
    if limits.max_counter_sets is not None and len(all_sets) > limits.max_counter_sets:
        return False
    if limits.max_counters_per_slice is not None and sum(map(_set_size, all_sets)) > limits.max_counters_per_slice:
        return False
    if limits.max_device_counters_per_slice is not None and sum(map(_device_counters, all_devices)) > limits.max_device_counters_per_slice:
        return False
    return True


def _first_fit(units: list[tuple[list[dict], list[dict]]], limits: ApiLimits, fresh: frozenset[int] = frozenset()) -> list[_Slice]:
    """Fill slices in order with units that must not be split (a counter set with its devices on 1.34);
    units whose index is in `fresh` start a new slice."""
    slices: list[_Slice] = []
    for index, (sets, devices) in enumerate(units):
        if not _fits(_Slice(), sets, devices, limits):
            what = f"counter set {sets[0]['name']} with {len(devices)} devices" if sets else f"device {devices[0]['name']}"
            raise SliceLimitError(f"{what} does not fit in one ResourceSlice under the served API's limits")
        if not slices or index in fresh or not _fits(slices[-1], sets, devices, limits):
            slices.append(_Slice())
        slices[-1].counter_sets += sets
        slices[-1].devices += devices
    return slices


def split(groups: list[tuple[dict | None, list[dict]]], limits: ApiLimits, per_gpu: bool = False,
          counter_slice: bool = False) -> list[_Slice]:
    """Slices holding every (counter set or None, devices) group, each slice within `limits`. `per_gpu`: every
    group starts a slice (NVIDIA's dynamic-MIG pools); `counter_slice`: on 1.35+ the counter sets' slice is
    published even when no GPU has a set (NVIDIA's, on a node with a MIG-capable GPU: an empty slice)."""
    for _, devices in groups:
        for device in devices:
            check_device(device, limits)
    for counter_set_, _ in groups:
        if counter_set_ and _set_size(counter_set_) > limits.max_counters_per_set:
            raise SliceLimitError(f"counter set {counter_set_['name']}: more than {limits.max_counters_per_set} counters")
    # As NVIDIA's driver: a GPU with a counter set gets a slice of its own (1.34: its set and its devices;
    # 1.35+: its devices, the counter sets of all GPUs sharing slices ahead of them).
    if limits.separate_counter_slices:
        # 1.35+: counter sets in slices of their own; devices find them by name within the pool
        sets = [([c], []) for c, _ in groups if c]
        devices, fresh = [], set()
        for counter_set_, ds in groups:
            if (counter_set_ or per_gpu) and ds:
                fresh.add(len(devices))
            devices += [([], [d]) for d in ds]
        set_slices = _first_fit(sets, limits) or ([_Slice()] if counter_slice else [])
        return set_slices + _first_fit(devices, limits, frozenset(fresh))
    units, fresh = [], set()
    for counter_set_, devices in groups:
        if per_gpu and devices:
            fresh.add(len(units))
        if counter_set_:
            fresh.add(len(units))
            units.append(([counter_set_], devices))  # 1.34: a device's counter set must be in its slice
        else:
            units += [([], [d]) for d in devices]
    return _first_fit(units, limits, frozenset(fresh))


def device_groups(inv: NodeInventory, mode: Mode, driver: str, faults: frozenset[str] = frozenset(),
                  groups: bool = False) -> list[tuple[dict | None, list[dict]]]:
    """Per GPU: its counter set (dynamic MIG only) and its devices, shareable where the mode says (NVIDIA's
    driver makes every device it publishes shareable under --consumable-shares: whole GPUs, static MIG
    devices, the partitionable full GPU and its MIG devices)."""
    def shared(devices: list[dict]) -> list[dict]:
        return [apply_consumable_shares(d, mode.shares, faults) for d in devices] if mode.shares else devices

    if mode.kind == "dynamic-mig":
        per_gpu = []
        for gpu in inv.gpus:
            offer = gpu.dynamic_offer
            if offer.partitions and gpu.profiles:
                counters = counter_set(gpu, faults)
                if offer.full_gpu:
                    counters = shared_counter_set(counters, mode.shares)
                devices = partitionable_devices(gpu, inv, driver, faults, offer.full_gpu, groups)
                per_gpu.append((counters, shared(devices)))
            else:  # no MIG, or Ampere with MIG mode off: offered whole, consuming nothing
                per_gpu.append((None, shared([whole_gpu_device(gpu, inv, driver, faults)])))
        return per_gpu
    return [(None, shared(live_devices(gpu, inv, driver, faults))) for gpu in inv.gpus]


def slice_name(node: str, driver: str, index: int) -> str:
    return f"{node}-{driver}-{index}"


def build_slices(node: str, inv: NodeInventory, mode: Mode, limits: ApiLimits, identity: DriverIdentity,
                 faults: frozenset[str] = frozenset(), generation: int = 1, node_uid: str | None = None,
                 groups: bool | None = None) -> list[dict]:
    """Every ResourceSlice of `node`'s pool (pool = node name) at `generation`; compatibility `groups` as the
    environment says unless given."""
    # NVIDIA's dynamic-MIG pools: a slice per GPU; on 1.35+ the counter sets' slice first wherever a GPU
    # has MIG (driver.go NewDriver chooses split slices only then; generateSplitResourceSlices)
    dynamic = mode.kind == "dynamic-mig"
    groups = compatibility_groups_on() if groups is None else groups
    parts = split(device_groups(inv, mode, identity.driver, faults, groups), limits, per_gpu=dynamic,
                  counter_slice=dynamic and any(gpu.mig_capable for gpu in inv.gpus))
    if not parts:
        parts = [_Slice()]  # an empty pool still says so: one slice without devices
    metadata_base: dict = {"labels": dict(MANAGED_BY)}
    if node_uid and "slices-outlive-node" not in faults:
        # owned by the Node, so the garbage collector removes the slices with it even without us
        metadata_base["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node, "uid": node_uid, "controller": True}]
    bodies = []
    for index, part in enumerate(parts):
        spec: dict = {
            "driver": identity.driver,
            "nodeName": f"{node}-elsewhere" if "wrong-node" in faults and mode.kind == "static-mig" else node,
            "pool": {"name": node, "generation": generation, "resourceSliceCount": len(parts) + ("pool-count-wrong" in faults)},
        }
        if part.counter_sets:
            spec["sharedCounters"] = part.counter_sets
        if part.devices or not part.counter_sets:
            spec["devices"] = part.devices
        bodies.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice",
                       "metadata": {"name": slice_name(node, identity.driver, index), **metadata_base}, "spec": spec})
    return bodies
