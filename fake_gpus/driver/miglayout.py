"""Static MIG: create a named layout ({profile name: count}) on every GPU through NVML.

The layout's profile names are resolved against the profiles NVML reports for each GPU, placements
are chosen among NVML's possible placements, and each GPU instance gets one compute instance spanning
it. A GPU that already holds exactly the layout's instances is left alone, so a restarted publisher
keeps the MIG UUIDs it published before.
"""

from __future__ import annotations

import ctypes
from collections import Counter
from typing import Mapping

import pynvml

from fake_gpus.driver.inventory import Gpu, MigProfile, Placement, read_gpu
from fake_gpus.mig_placement import find_placements


class MigLayoutError(ValueError):
    """A layout that cannot be created on a GPU; one line naming the GPU and the problem."""


def plan(gpu: Gpu, layout: Mapping[str, int]) -> list[tuple[MigProfile, Placement]]:
    """Placements for every instance of `layout` on `gpu`, or MigLayoutError."""
    wanted: list[MigProfile] = []
    for name, count in layout.items():
        profile = gpu.profile(name)
        if profile is None:
            offered = ", ".join(p.name for p in gpu.profiles) or "none (no MIG)"
            raise MigLayoutError(f"GPU {gpu.minor} ({gpu.product_name}): NVML offers no MIG profile {name!r}; offered: {offered}")
        if count > profile.instance_count:
            raise MigLayoutError(f"GPU {gpu.minor}: {count} x {name} asked, NVML allows {profile.instance_count}")
        wanted += [profile] * count
    wanted.sort(key=lambda p: -p.size)  # big instances first: created in that order, as before
    runs = find_placements([[(pl.start, pl.size) for pl in p.placements] for p in wanted], gpu.memory_slices)
    if runs is None:
        raise MigLayoutError(f"GPU {gpu.minor} ({gpu.product_name}): layout {dict(layout)} does not fit its memory slices")
    placements = [Placement(start, size) for start, size in runs]
    return list(zip(wanted, placements))


def _full_compute_profile(gi, slice_count: int) -> int:
    """Id of the compute-instance profile spanning the whole GPU instance."""
    for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        except pynvml.NVMLError:
            continue
        if info.sliceCount == slice_count:
            return info.id
    raise MigLayoutError(f"no compute-instance profile spans a {slice_count}-slice GPU instance")


def _destroy_all(handle, gpu: Gpu) -> None:
    for mig in gpu.mig_devices:
        gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, mig.gi_id)
        pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, mig.ci_id))
    # GPU instances without a compute instance are no MIG device: list them per profile
    for profile in gpu.profiles:
        buf = (pynvml.c_nvmlGpuInstance_t * max(1, profile.instance_count))()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, buf, ctypes.byref(count))
        for i in range(count.value):
            pynvml.nvmlGpuInstanceDestroy(buf[i])


def apply_layout(layout: Mapping[str, int]) -> None:
    """Create `layout` on every GPU of the node NVML is open on (needs an open session)."""
    for index in range(pynvml.nvmlDeviceGetCount()):
        gpu = read_gpu(index)
        if not gpu.mig_capable:
            raise MigLayoutError(f"GPU {gpu.minor} ({gpu.product_name}) is not MIG-capable")
        steps = plan(gpu, layout)
        have = Counter(m.profile_id for m in gpu.mig_devices)
        if gpu.mig_enabled and have == Counter(p.id for p, _ in steps) and len(gpu.mig_devices) == len(steps):
            continue
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            if not gpu.mig_enabled:
                pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
            _destroy_all(handle, gpu)
            for profile, placement in steps:
                where = pynvml.c_nvmlGpuInstancePlacement_t()
                where.start, where.size = placement.start, placement.size
                gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile.id, ctypes.pointer(where))
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, _full_compute_profile(gi, profile.slice_count))
        except pynvml.NVMLError as exc:
            raise MigLayoutError(f"GPU {gpu.minor}: creating layout {dict(layout)} through NVML failed: {exc}") from exc
