"""Static MIG: create a named layout ({profile name: count}) on every GPU through NVML.

The layout's profile names are resolved against the profiles NVML reports for each GPU, placements
are chosen among NVML's possible placements, and each GPU instance gets one compute instance spanning
it, made by the adapter's `create_instance` as the plugin's are. A GPU that already holds exactly the
layout's instances is left alone, so a restarted publisher keeps the MIG UUIDs it published before.
"""

from __future__ import annotations

from collections import Counter
from typing import Mapping

import pynvml

from fake_gpus.driver.nvml_adapter import DeviceError, Gpu, MigProfile, Nvml, Placement
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


def apply_layout(layout: Mapping[str, int], nvml: Nvml | None = None) -> None:
    """Create `layout` on every GPU of the node NVML is open on (needs an open session), through the
    adapter's `create_instance`, the same call the kubelet plugin makes for a dynamic MIG device."""
    nvml = nvml or Nvml()
    for index in range(nvml.gpu_count()):
        gpu = nvml.gpu(index)
        if not gpu.mig_capable:
            raise MigLayoutError(f"GPU {gpu.minor} ({gpu.product_name}) is not MIG-capable")
        steps = plan(gpu, layout)
        have = Counter(m.profile_id for m in gpu.mig_devices)
        if gpu.mig_enabled and have == Counter(p.id for p, _ in steps) and len(gpu.mig_devices) == len(steps):
            continue
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        try:
            nvml.enable_mig(handle)
            nvml.destroy_all(handle)
            for profile, placement in steps:
                nvml.create_instance(handle, profile, placement.start, placement.size)
        except (pynvml.NVMLError, DeviceError) as exc:
            raise MigLayoutError(f"GPU {gpu.minor}: creating layout {dict(layout)} through NVML failed: {exc}") from exc
