"""Fault-injection switches: deliberate driver bugs that prove the suites can catch them.

Switches are named in $DRA_TESTBED_FAULTS (comma-separated), read by every driver process at start.
Each one breaks exactly one promise of a correct driver; a suite that still passes with a switch on
does not test that promise.
"""

from __future__ import annotations

import os
from typing import Iterable, Mapping

FAULTS_ENV = "DRA_TESTBED_FAULTS"

FAULTS: dict[str, str] = {
    # publisher
    "oversized-counters": "the counter set of each GPU offers twice the real engine and memory counters",
    "short-placement": "MIG devices consume one memory slice fewer than their placement covers",
    "wrong-memory": "whole-GPU devices publish twice their real memory capacity",
    "oversized-attribute": "existing MIG devices carry a string attribute longer than the API allows (their slices are refused)",
    "pool-count-wrong": "every pool announces one slice more (resourceSliceCount) than it publishes",
    "wrong-node": "slices of static-MIG nodes name a node that does not exist instead of their own",
    "slices-outlive-node": "slices are neither owned by their Node nor deleted when it goes",
    "restart-churn": "a restarted publisher rewrites every pool at a new generation although nothing changed",
    "renamed-attribute": "devices publish `arch` instead of NVIDIA's attribute name `architecture`",
    "mig-profile-names": "MIG devices name their profile as nvidia-smi prints it (`MIG 1g.10gb`), not as NVIDIA's DRA driver does",
    "class-selects-all": "DeviceClass gpu.nvidia.com selects every device of the driver, MIG devices included",
    "counters-undeclared": "the partitionable full GPU shares its GPU's memory slices with the MIG devices without declaring it "
                           "(no consumesCounters), so it can be allocated while MIG devices of the same GPU are",
    "parent-uuid-unstable": "partitionable MIG devices carry a parentUUID of their own instead of their GPU's UUID",
    "joined-node-unpublished": "a node that joins after the publisher started gets no slices (only the nodes listed at start do)",
    "mode-switch-ignored": "a node whose hardware labels change (a mode switch) keeps the hardware and slices of its old labels",
    "shares-not-multiple": "with consumable shares on, devices publish their capacity request policies but not allowMultipleAllocations",
    "shares-exceed-device": "with consumable shares on, a device's memory request policy lets one claim take twice the memory the device has",
    "shares-step-not-divisor": "with consumable shares on, the memory request policy's step (3Mi) does not divide the device's memory",
    # device health (nodes with health checks on; fake_gpus/driver/health.py)
    "taint-never-published": "the health monitor sees failed GPUs but their devices are published without taints",
    "taint-wrong-effect": "fatal Xids and lost GPUs taint with effect None instead of NoSchedule, so failed GPUs still take claims",
    "ignored-xids-wrong": "application Xids (13, 31, 43, 45, 68, 109) count as fatal and keep their GPU from new claims",
    "taint-never-removed": "a GPU that is back or was reset keeps its taints (NVIDIA's driver never lifts them either)",
    # (+ the under-declared profiles below)
    # kubelet plugin
    "prepare-fails": "NodePrepareResources answers every claim with an error",
    "prepare-hangs": "NodePrepareResources never answers",
    "unprepare-leaks": "NodeUnprepareResources reports success but leaves the MIG instance in place",
    "cdi-wrong-device": "the CDI spec exposes a different device than the one allocated",
    "cdi-all-devices": "the CDI spec of a whole-GPU claim exposes every GPU of the node, not only the allocated ones",
    "checkpoint-lost": "a restarted kubelet plugin forgets what it had prepared, so unpreparing those claims leaks their MIG instances",
    "admin-access-refused": "a whole GPU already prepared for one claim is refused to a second (admin-access) claim",
    "nvml-chooses-placement": "a dynamic MIG device is created where NVML puts a new instance of its profile, not at the allocated placement",
    "sharing-ignored": "prepare succeeds but applies no sharing strategy (TimeSlicing sets no time slice, MPS starts no control daemon)",
    # device status (fake_gpus/driver/kubeletplugin/device_status.py)
    "device-status-missing": "prepare succeeds but writes no status.devices entries (no Ready condition, no UUIDs) into the claim",
    "device-status-left": "unprepare leaves the plugin's status.devices entries in the claim",
    # fabric-attached GPUs ($DRA_TESTBED_FABRIC_ATTACH; fake_gpus/driver/fabric_attach.py)
    "binding-condition-never-set": "the fabric-attach controller never sets a claim's dra-testbed.io/attached condition, "
                                   "so the scheduler never binds its pod",
    "health-stream-always-healthy": "the health stream (dra-health/v1alpha1) reports every device healthy, failed GPUs included",
    "mps-limits-ignored": "an MPS claim's control daemon starts without the claim's active thread percentage and pinned memory limits",
    "mps-daemon-left-behind": "unprepare of an MPS claim leaves its control daemon (its Deployment) running",
}

NVML_PLACES_FAULT = "nvml-chooses-placement"  # read by the NVML adapter (nvml_adapter.Nvml.open)

# One MIG profile under-declared: its devices leave memory-slice counters of their placement out of
# consumesCounters, so its partitions overlap others physically while the scheduler sees them disjoint.
# Only that profile (a profile name belongs to one board here) and only that counter: `first`, `last` or
# `middle` (the second) memory slice of each placement, or `all` of them. The generated workloads must find
# these within the ci profile without being tuned for any one (benchmarks/overlap_power.py).
UNDERDECLARED: dict[str, tuple[str, str]] = {
    "underdeclared-1g20gb-last": ("1g.20gb", "last"),  # H100 80GB
    "underdeclared-3g40gb-first": ("3g.40gb", "first"),  # H100 80GB
    "underdeclared-1g10gbme-all": ("1g.10gb+me", "all"),  # H100 80GB
    "underdeclared-2g35gb-first": ("2g.35gb", "first"),  # H200
    "underdeclared-4g71gb-last": ("4g.71gb", "last"),  # H200
    "underdeclared-3g71gb-middle": ("3g.71gb", "middle"),  # H200
}
FAULTS.update({name: f"MIG {profile} devices leave {'every' if which == 'all' else f'the {which}'} memory slice of their placement "
                     f"out of consumesCounters, so they overlap other partitions physically"
               for name, (profile, which) in UNDERDECLARED.items()})


def declared_slices(profile: str, slices: range, faults: frozenset[str]) -> list[int]:
    """The memory slices a device of `profile` at `slices` declares: all of them unless an UNDERDECLARED
    switch of that profile is on."""
    left_out: set[int] = set()
    for name in faults & UNDERDECLARED.keys():
        wanted, which = UNDERDECLARED[name]
        if wanted == profile:
            picks = {"first": slices[:1], "last": slices[-1:], "middle": slices[1:2], "all": slices}[which]
            left_out.update(picks)
    return [s for s in slices if s not in left_out]


class UnknownFaultError(ValueError):
    """A fault name that is not a switch."""


def parse_faults(text: str) -> frozenset[str]:
    """The set of switches in a comma-separated list; UnknownFaultError names the valid ones."""
    names = frozenset(n.strip() for n in text.split(",") if n.strip())
    unknown = sorted(names - FAULTS.keys())
    if unknown:
        raise UnknownFaultError(f"unknown fault {unknown[0]!r}; valid: {', '.join(FAULTS)}")
    return names


def active_faults(environ: Mapping[str, str] | None = None) -> frozenset[str]:
    """The switches on for this process (or, given `environ`, for the hosted node whose environment it is)."""
    return parse_faults((os.environ if environ is None else environ).get(FAULTS_ENV, ""))


def fault_env(faults: Iterable[str]) -> dict[str, str]:
    """The environment entry that turns `faults` on in a driver process."""
    return {FAULTS_ENV: ",".join(sorted(parse_faults(",".join(faults))))}
