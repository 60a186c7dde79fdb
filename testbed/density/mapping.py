"""One claim per trace pod, the same in every mode: a GPU share becomes a MIG profile, with fallbacks.

The rule (README, "Density"): a share of `gpu_milli` of one GPU maps to the smallest MIG profile whose
compute share (compute slices / the board's 7) covers it: 1..142 -> 1g, 143..285 -> 2g, 286..428 -> 3g,
429..571 -> 4g, 572..999 -> 7g (no 5g or 6g profile exists). Of the profiles with that many compute
slices the one with the least memory is taken (1g.10gb, not 1g.20gb; never a +me profile). The claim asks,
with `firstAvailable`, for that profile, then each larger compute size, then a whole GPU. A pod of 1000
milli or of several GPUs asks for `num_gpu` whole GPUs, or else as many full-size (7g) MIG devices.

Whole-GPU mode publishes no MIG devices, static MIG only its layout's, dynamic MIG every profile, so one
claim list serves all three modes and the scheduler alone decides what each mode can do with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterable

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import DriverIdentity
from testbed.density.trace import TracePod

COMPUTE_SLICES = 7  # the shares are sevenths (most MIG boards'); a 4-slice board's 1g covers 1/4, more than 1/7
SIZES = (1, 2, 3, 4, 7)  # compute slices of the GPU-instance profiles NVIDIA ships


@dataclass(frozen=True)
class Tier:
    """One step of a claim's fallback list."""

    name: str  # subrequest name: "mig-1g", ..., "gpu"
    compute: int  # compute slices (7 for a whole GPU)
    profiles: tuple[str, ...]  # MIG profile names of the fleet's boards; () for a whole GPU


def compute_size(gpu_milli: int) -> int:
    """Compute slices of the smallest profile whose share of the GPU covers `gpu_milli`."""
    needed = math.ceil(gpu_milli * COMPUTE_SLICES / 1000)
    return next(size for size in SIZES if size >= needed)


def fleet_profiles(boards: Iterable[str]) -> dict[int, tuple[str, ...]]:
    """Per compute size, the least-memory profile of that size on each board (no +me, +gfx, -me variants).

    A board split into 4 compute slices (A30, RTX PRO 6000) has no 7g: its whole-GPU profile is its full-size
    MIG device, so it stands in the 7g tier too (a whole-GPU pod's MIG fallback)."""
    found: dict[int, set[str]] = {size: set() for size in SIZES}
    for key in set(boards):
        board = get_board(key)
        plain = [p for p in board.gpu_instance_profiles if "+" not in p.name and "-" not in p.name]
        for size in {*SIZES} & {p.slice_count for p in plain}:
            found[size].add(min((p for p in plain if p.slice_count == size), key=lambda p: p.memory_slices).name)
        if plain and board.compute_slices != COMPUTE_SLICES:
            found[COMPUTE_SLICES].add(next(p.name for p in plain if p.slice_count == board.compute_slices))
    return {size: tuple(sorted(names)) for size, names in found.items()}


def tiers(pod: TracePod, profiles: dict[int, tuple[str, ...]]) -> list[Tier]:
    """The fallback list of `pod`: whole GPUs for whole and multi-GPU pods, else MIG sizes up, then a GPU."""
    full = Tier("mig-7g", 7, profiles[7])
    if pod.gpu_milli >= 1000:
        return [Tier("gpu", 7, ()), full]
    first = compute_size(pod.gpu_milli)
    return [Tier(f"mig-{size}g", size, profiles[size]) for size in SIZES if size >= first] + [Tier("gpu", 7, ())]


def claim_body(pod: TracePod, name: str, profiles: dict[int, tuple[str, ...]], identity: DriverIdentity) -> dict:
    """The ResourceClaim of `pod`, named `name`."""
    subrequests = []
    for tier in tiers(pod, profiles):
        sub: dict = {"name": tier.name, "count": pod.num_gpu}
        if tier.profiles:
            names = ", ".join(f"'{p}'" for p in tier.profiles)
            sub["deviceClassName"] = identity.mig_class
            sub["selectors"] = [{"cel": {"expression": f"device.attributes['{identity.driver}'].profile in [{names}]"}}]
        else:
            sub["deviceClassName"] = identity.gpu_class
        subrequests.append(sub)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "labels": {"dra-testbed.io/density": "true"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": subrequests}]}}}


def pod_body(pod: TracePod, name: str, claim: str) -> dict:
    """A pod using the claim `claim`; it carries the trace's share so reports can read it back."""
    return {"apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": name, "labels": {"dra-testbed.io/density": "true"},
                         "annotations": {"dra-testbed.io/trace-pod": pod.name, "dra-testbed.io/gpu-milli": str(pod.gpu_milli),
                                         "dra-testbed.io/num-gpu": str(pod.num_gpu)}},
            "spec": {"containers": [{"name": "job", "image": "registry.invalid/trace-job:1",
                                     "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
                     "terminationGracePeriodSeconds": 0}}
