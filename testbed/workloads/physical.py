"""What a node's NVML must hold, judged from the claims its kubelet prepared: pure checks, no I/O.

The oracle and truth.py judge allocations; this judges what the kubelet plugin then did to the hardware.
After a step has settled, each node's NVML state is exactly what its prepared claims say, nothing more:
on a partitionable (dynamic-MIG) node one GPU instance per prepared MIG device, of its profile, at the
placement its device name gives (the allocated one, not one NVML picked), each with its compute instance;
on a static-MIG node the instances it was provisioned with, never more or fewer; on a whole-GPU node none.
Each GPU's compute mode and time slice are the defaults unless a prepared claim's GpuConfig asks for a
sharing strategy (TimeSlicing: compute mode DEFAULT and the interval's time slice; MPS: EXCLUSIVE_PROCESS,
as NVIDIA's plugin sets them, docs/design/sharing.md). Where the bed runs MPS control daemons (NodeNvml.mps
read), a GPU whose prepared claim asks MPS has exactly one daemon, holding the claim's active thread percentage
and pinned memory limit for that GPU; every other judged GPU has none (after unprepare too).

A claim whose prepare failed (the driver refused it, say a sharing config it does not take) is neither
required nor forbidden: what it leaves is the prepare check's business, not this one's; a GPU it touches
keeps whatever settings it has. Once the claim is released what it left is judged like anything else,
except a known upstream leak the bed names (KNOWN_LEAKS): excused, and counted by the caller.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Iterable, Mapping, Sequence

from fake_gpus.driver.identity import parse_device_name
from testbed.workloads.oracle import Result, Violation

PHYSICAL = "physical"
# NVML's compute modes (nvml.h NVML_COMPUTEMODE_*) and NVIDIA's time-slice intervals (its TimeSliceInterval.Int)
COMPUTE_DEFAULT, COMPUTE_EXCLUSIVE_PROCESS = 0, 3
TIME_SLICES = {"Default": 0, "Short": 1, "Medium": 2, "Long": 3}
DEFAULT_SETTINGS = (COMPUTE_DEFAULT, 0)
# NVIDIA's gpu-kubelet-plugin: a prepare of the full-size MIG profile (7g.*) fails on a GPU whose NVML lacks the
# compute-instance profile it asks for, after creating the GPU instance, and its rollback fails too, so a GPU
# instance over the whole GPU, without a compute instance, stays (kubernetes-sigs/dra-driver-nvidia-gpu#1480,
# seen on a real A100; pinned by suites/nvidia/test_nvidia_prepare.py). Driver kind -> its known leaks.
FULL_GPU_LEAK = "dra-driver-nvidia-gpu#1480"
KNOWN_LEAKS = {"nvidia": (FULL_GPU_LEAK,)}
# Drivers whose MPS control daemons a KWOK bed cannot run (testbed/kubelet/mps_pods.py: NVIDIA's script chroots into
# /driver-root), so no daemon can be judged for them.
MPS_NOT_RUN = frozenset({"nvidia"})
_QUANTITY_SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}


@dataclass(frozen=True, order=True)
class Instance:
    """A GPU instance: GPU minor, GPU-instance profile id, placement start and size (memory slices)."""

    minor: int
    profile_id: int
    start: int
    size: int


def named(instances: Iterable[Instance]) -> str:
    """Instances as a message lists them (placement: start+size memory slices), "none" for none."""
    return ", ".join(f"gpu {i.minor} profile {i.profile_id} at {i.start}+{i.size}" for i in sorted(instances)) or "none"


@dataclass(frozen=True)
class MpsDaemon:
    """What an MPS control daemon holds for one GPU: its default active thread percentage and pinned memory limit
    in MiB (None: never set); `pid` tells daemons apart (0 in what a claim asks for)."""

    active_thread_percentage: int | None
    pinned_mib: int | None
    pid: int = 0


@dataclass(frozen=True)
class NodeNvml:
    """A node's NVML as read: GPU instances with a compute instance, those without one (half made), each GPU's
    (compute mode, time slice) and UUID by minor, and the MPS control daemons serving each GPU (None: not read)."""

    instances: frozenset[Instance]
    bare: frozenset[Instance] = frozenset()
    settings: Mapping[int, tuple[int, int]] = field(default_factory=dict)
    uuids: Mapping[int, str] = field(default_factory=dict)
    mps: Mapping[int, tuple[MpsDaemon, ...]] | None = None


@dataclass(frozen=True)
class HeldClaim:
    """An allocated claim of the node, as its kubelet holds it: `prepared` (every pod using it started) or
    not (`failed`: its prepare was refused; neither: nothing of it may remain, it is released)."""

    owner: str
    results: Sequence[Result]
    config: Sequence[dict]
    prepared: bool
    failed: bool = False


def mig_instance(device: str, sizes: Mapping[int, int]) -> Instance | None:
    """The GPU instance a MIG device name stands for (`sizes`: the board's placement size per profile id);
    None for a whole GPU or a name that is no device name of ours or NVIDIA's."""
    try:
        ref = parse_device_name(device)
    except ValueError:
        return None
    if not ref.is_mig or ref.profile_id is None or ref.start is None:
        return None
    return Instance(ref.minor, ref.profile_id, ref.start, sizes.get(ref.profile_id, 0))


def whole_minor(device: str) -> int | None:
    """The GPU minor of a whole-GPU device name, None for a MIG device."""
    try:
        ref = parse_device_name(device)
    except ValueError:
        return None
    return None if ref.is_mig else ref.minor


def sharing_settings(config: Sequence[dict], request: str, driver: str) -> tuple[int, int] | None:
    """(compute mode, time slice) the last GpuConfig of `driver` naming `request` asks for (entries naming no
    request reach all of them; the claim's own come after its class's, so they win); None: no sharing asked.

    A request is named as the allocation result names it, exactly: a config naming only the main request `r`
    does not reach the devices of its firstAvailable subrequest `r/s`. That is NVIDIA's prepare (it matches
    result.Request against the config's list; dra-driver-nvidia-gpu 95932046 device_state.go), which ours
    follows, against the API's own word (DeviceAllocationConfiguration.requests) that such a config applies to
    all subrequests: a known upstream bug (docs/design/sharing.md), judged as the reference behaves, so the check
    holds a driver to the reference; suites/properties/test_physical_judge.py pins that ours agrees."""
    sharing = reaching_sharing(config, request, driver)
    strategy = (sharing or {}).get("strategy")
    if strategy == "TimeSlicing":
        interval = ((sharing or {}).get("timeSlicingConfig") or {}).get("interval") or "Default"
        return (COMPUTE_DEFAULT, TIME_SLICES.get(interval, -1))
    if strategy == "MPS":
        return (COMPUTE_EXCLUSIVE_PROCESS, 0)
    return None


def reaching_sharing(config: Sequence[dict], request: str, driver: str) -> dict | None:
    """The sharing of the last GpuConfig of `driver` that reaches `request` (sharing_settings' rule); None when
    none reaches it, {} when the one that does has no sharing."""
    found = None
    for entry in config:
        opaque = entry.get("opaque") or {}
        params = opaque.get("parameters") or {}
        named = entry.get("requests") or []
        if opaque.get("driver") != driver or params.get("kind") != "GpuConfig":
            continue
        if named and request not in named:
            continue
        found = params.get("sharing") or {}
    return found


def mebibytes(quantity: object) -> int | None:
    """Whole MiB of a Kubernetes quantity (rounded down), None when it is none."""
    text = str(quantity)
    digits = text.rstrip("kMGTi")
    try:
        return int(float(digits) * _QUANTITY_SUFFIXES[text[len(digits):]]) // 2**20
    except (ValueError, KeyError):
        return None


def wanted_mps(claims: Iterable[HeldClaim], uuids: Mapping[int, str], driver: str) -> dict[int, MpsDaemon | None]:
    """Per GPU minor that a prepared claim's MPS config reaches as a whole GPU, the daemon it asks for (pinned limit:
    the default one, a per-device entry keyed by the GPU's UUID or its index among the claim's MPS GPUs, sorted by
    UUID, winning); None: not judged (a failed claim touches it, or two claims ask MPS of it). Minors absent: no daemon."""
    out: dict[int, MpsDaemon | None] = {}
    for claim in claims:
        if not (claim.prepared or claim.failed):
            continue
        wants = []
        for result in claim.results:
            minor = whole_minor(result.device.device)
            if minor is None:
                mig = mig_instance(result.device.device, {})
                # a daemon serving MIG devices is listed on their GPU: this model does not judge it
                if mig is not None and (claim.failed or (reaching_sharing(claim.config, result.request, driver) or {}).get("strategy") == "MPS"):
                    out[mig.minor] = None
                continue
            if claim.failed:
                out[minor] = None
                continue
            sharing = reaching_sharing(claim.config, result.request, driver) or {}
            if sharing.get("strategy") == "MPS":
                wants.append((uuids.get(minor, ""), minor, sharing.get("mpsConfig") or {}))
        group = sorted(u for u, _, _ in wants)
        for uuid, minor, mps in wants:
            pinned = mebibytes(mps["defaultPinnedDeviceMemoryLimit"]) if mps.get("defaultPinnedDeviceMemoryLimit") is not None else None
            for key, value in (mps.get("defaultPerDevicePinnedMemoryLimit") or {}).items():
                if key == uuid or (str(key).isdigit() and int(key) < len(group) and group[int(key)] == uuid):
                    pinned = mebibytes(value)
            thread = mps.get("defaultActiveThreadPercentage")
            want = MpsDaemon(int(thread) if thread is not None else None, pinned)
            out[minor] = want if minor not in out else None
    return out


def mps_problems(node: str, observed: NodeNvml, claims: Sequence[HeldClaim], driver: str) -> list[Violation]:
    """The judged GPUs whose MPS control daemons are not what their prepared claims ask for."""
    if observed.mps is None:
        return []
    wanted = wanted_mps(claims, observed.uuids, driver)
    problems = []
    for minor in sorted(set(observed.settings) | set(observed.mps)):
        if minor in wanted and wanted[minor] is None:
            continue
        want, seen = wanted.get(minor), sorted(observed.mps.get(minor, ()), key=lambda d: d.pid)
        asked = [] if want is None else [(want.active_thread_percentage, want.pinned_mib)]
        held = [(d.active_thread_percentage, d.pinned_mib) for d in seen]
        if want is None and seen:
            problems.append(Violation(PHYSICAL, f"{node}: GPU {minor} has {len(seen)} MPS control daemon(s) (pids "
                                      f"{[d.pid for d in seen]}); no prepared claim asks MPS of it", asked, held))
        elif want is not None and held != asked:
            problems.append(Violation(PHYSICAL, f"{node}: GPU {minor} has MPS control daemons holding (thread %, pinned MiB) "
                                      f"{held}; its prepared claim asks for one holding {asked[0]}", asked, held))
    return problems


def expected_settings(claims: Iterable[HeldClaim], gpus: Iterable[int], driver: str) -> dict[int, tuple[int, int] | None]:
    """Each GPU's settings per the prepared claims (None: not judged, a failed claim touches it, or a sharing
    config reaches it through a MIG device, which this model does not cover)."""
    out: dict[int, tuple[int, int] | None] = {minor: DEFAULT_SETTINGS for minor in gpus}
    for claim in claims:
        if not (claim.prepared or claim.failed):
            continue
        for result in claim.results:
            minor = whole_minor(result.device.device)
            wanted = sharing_settings(claim.config, result.request, driver)
            if minor is None:
                mig = mig_instance(result.device.device, {})
                if mig is not None and (wanted is not None or claim.failed):
                    out[mig.minor] = None
                continue
            if claim.failed:
                out[minor] = None
            elif wanted is not None and minor in out and out[minor] is not None:
                out[minor] = wanted
    return out


def known_leaks(observed: NodeNvml, sizes: Mapping[int, int], leaks: Iterable[str]) -> frozenset[Instance]:
    """The half-made instances that a known leak of `leaks` explains: for FULL_GPU_LEAK, one without a compute
    instance spanning all of its GPU's memory slices (the board's largest placement, from slice 0)."""
    if FULL_GPU_LEAK not in leaks or not sizes:
        return frozenset()
    whole = max(sizes.values())
    return frozenset(i for i in observed.bare if i.start == 0 and i.size == whole)


def off_layout(observed: NodeNvml, layout: Mapping[int, int]) -> dict[int, dict[int, int]]:
    """The GPUs (minor -> instances per profile id) whose MIG instances are not those of a static layout
    (`layout`: instances per profile id on every GPU)."""
    wanted = {pid: n for pid, n in layout.items() if n}
    out = {}
    for minor in sorted(observed.settings):
        have = Counter(i.profile_id for i in observed.instances if i.minor == minor)
        if dict(have) != wanted:
            out[minor] = dict(sorted(have.items()))
    return out


def judge_node(node: str, kind: str, observed: NodeNvml, claims: Sequence[HeldClaim], sizes: Mapping[int, int],
               driver: str, provisioned: frozenset[Instance] | None = None,
               excused: frozenset[Instance] = frozenset(), layout: Mapping[int, int] | None = None) -> list[Violation]:
    """The node's NVML against its claims; `kind` its mode ("whole", "dynamic-mig", "static-mig"),
    `provisioned` a static-MIG node's instances once they were its layout's, `layout` that layout (instances
    per profile id on every GPU), `excused` half-made instances a known upstream leak explains (known_leaks)."""
    problems = []
    if kind == "static-mig" and layout is not None and (off := off_layout(observed, layout)):
        problems.append(Violation(PHYSICAL, f"{node}: GPUs {sorted(off)} do not hold their static MIG layout's instances "
                                  f"(profile id: count)", dict(sorted(layout.items())), off))
    prepared = {i for c in claims if c.prepared and not c.failed for r in c.results
                if (i := mig_instance(r.device.device, sizes)) is not None}
    allowed = {i for c in claims if c.failed for r in c.results if (i := mig_instance(r.device.device, sizes)) is not None}
    if kind == "static-mig":
        wanted = provisioned if provisioned is not None else observed.instances
        missing, extra = sorted(wanted - observed.instances), sorted(observed.instances - wanted)
        absent = sorted(prepared - observed.instances)
        if absent:
            problems.append(Violation(PHYSICAL, f"{node}: prepared MIG devices have no instance in NVML: {named(absent)}",
                                      named(prepared), named(observed.instances)))
        if missing or extra:
            problems.append(Violation(PHYSICAL, f"{node}: static MIG layout changed (gone: {named(missing)}; "
                                      f"new: {named(extra)})",
                                      named(wanted), named(observed.instances)))
    else:
        wanted = prepared if kind == "dynamic-mig" else set()
        missing = sorted(wanted - observed.instances)
        extra = sorted(observed.instances - wanted - allowed)
        if missing or extra:
            problems.append(Violation(
                PHYSICAL, f"{node}: NVML's MIG instances are not the prepared claims' devices (missing: "
                          f"{named(missing)}; not prepared for any claim: {named(extra)})",
                named(wanted), named(observed.instances)))
    half = sorted(observed.bare - allowed - excused)
    if half:
        problems.append(Violation(PHYSICAL, f"{node}: GPU instances without a compute instance: {named(half)}",
                                  [], named(half)))
    problems += mps_problems(node, observed, claims, driver)
    for minor, wanted_settings in sorted(expected_settings(claims, observed.settings, driver).items()):
        seen = observed.settings.get(minor)
        if wanted_settings is not None and seen is not None and seen != wanted_settings:
            problems.append(Violation(PHYSICAL, f"{node}: GPU {minor} has compute mode {seen[0]}, time slice {seen[1]}; its prepared "
                                      f"claims ask for compute mode {wanted_settings[0]}, time slice {wanted_settings[1]}",
                                      list(wanted_settings), list(seen)))
    return problems
