"""DeviceClasses as NVIDIA's Helm chart creates them (deployments/helm/dra-driver-nvidia-gpu/templates,
resources.gpus.enabled): gpu.nvidia.com (with extendedResourceName nvidia.com/gpu on resource.k8s.io/v1),
mig.nvidia.com and vfio.gpu.nvidia.com."""

from __future__ import annotations

DRIVER = "gpu.nvidia.com"


def _device_class(name: str, kind: str, extended: str | None = None) -> dict:
    spec: dict = {"selectors": [{"cel": {"expression": f"device.driver == '{DRIVER}' && device.attributes['{DRIVER}'].type == '{kind}'"}}]}
    if extended:
        spec["extendedResourceName"] = extended
    return {"apiVersion": "resource.k8s.io/v1", "kind": "DeviceClass", "metadata": {"name": name}, "spec": spec}


def chart_device_classes() -> list[dict]:
    return [_device_class("gpu.nvidia.com", "gpu", "nvidia.com/gpu"), _device_class("mig.nvidia.com", "mig"),
            _device_class("vfio.gpu.nvidia.com", "vfio")]
