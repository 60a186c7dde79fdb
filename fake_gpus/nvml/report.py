#!/usr/bin/env python3
"""Print, as one JSON document, what NVML shows this process: the workload image's entry point.

Standard library plus nvidia-ml-py only, since it runs inside the workload image. With --sleep it
stays up afterwards, so a pod keeps its devices while a test inspects the node.
"""

from __future__ import annotations

import ctypes
import json
import os
import sys
import time

import pynvml


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _mig_devices(handle) -> list[dict]:
    found = []
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError_NotFound:
            continue
        found.append({
            "uuid": _text(pynvml.nvmlDeviceGetUUID(mig)),
            "name": _text(pynvml.nvmlDeviceGetName(mig)),
            "memory_total": pynvml.nvmlDeviceGetMemoryInfo(mig).total,
            "gpu_instance_id": pynvml.nvmlDeviceGetGpuInstanceId(mig),
            "compute_instance_id": pynvml.nvmlDeviceGetComputeInstanceId(mig),
        })
    return found


def _gpu_instances(handle) -> list[dict] | None:
    """The GPU instances NVML shows on a MIG-mode GPU, with or without a compute instance (a MIG device is
    a compute instance: a GPU instance left without one is no MIG device, yet holds its slices). None
    where NVML refuses the listing (real NVML requires a privileged user for it)."""
    found = []
    try:
        for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                profile = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue  # a profile this board does not offer
            buf = (pynvml.c_nvmlGpuInstance_t * max(1, profile.instanceCount))()
            count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, buf, ctypes.byref(count))
            for k in range(count.value):
                info = pynvml.nvmlGpuInstanceGetInfo(buf[k])
                found.append({"id": info.id, "profile_id": info.profileId, "start": info.placement.start, "size": info.placement.size})
    except pynvml.NVMLError:
        return None
    return sorted(found, key=lambda g: g["id"])


def _optional(call, *args):
    """What an NVML call returns, or None where this NVML does not answer it."""
    try:
        value = call(*args)
    except pynvml.NVMLError:
        return None
    return _text(value) if isinstance(value, bytes) else value


def _facts(handle) -> dict:
    """What NVIDIA's DRA attributes mirror: compute capability, PCI bus id, brand and architecture numbers."""
    pci = _optional(pynvml.nvmlDeviceGetPciInfo, handle)
    capability = _optional(pynvml.nvmlDeviceGetCudaComputeCapability, handle)
    return {"cuda_compute_capability": list(capability) if capability else None,
            "pci_bus_id": _text(pci.busId) if pci is not None else None,
            "brand": _optional(pynvml.nvmlDeviceGetBrand, handle),
            "architecture": _optional(pynvml.nvmlDeviceGetArchitecture, handle)}


def report() -> dict:
    """Devices NVML lists, with their MIG devices; an "error" key when NVML cannot start."""
    out: dict = {"env": {k: v for k, v in os.environ.items() if k.startswith(("NVIDIA_", "FAKE_NVML_", "CUDA_"))}}
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        return {**out, "error": f"nvmlInit: {exc}", "devices": []}
    try:
        out["driver_version"] = _text(pynvml.nvmlSystemGetDriverVersion())
        out["cuda_driver_version"] = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        devices = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            try:
                current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
            except pynvml.NVMLError:  # boards without MIG answer NOT_SUPPORTED
                current = 0
            devices.append({
                "index": index,
                "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                "name": _text(pynvml.nvmlDeviceGetName(handle)),
                "memory_total": pynvml.nvmlDeviceGetMemoryInfo(handle).total,
                "mig_mode": current,
                "mig_devices": _mig_devices(handle) if current else [],
                "gpu_instances": _gpu_instances(handle) if current else [],
                **_facts(handle),
            })
        out["devices"] = devices
    finally:
        pynvml.nvmlShutdown()
    return out


def main(argv: list[str]) -> int:
    print(json.dumps(report(), sort_keys=True), flush=True)
    if "--sleep" in argv:
        while True:
            time.sleep(3600)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
