"""The names users' manifests already use with NVIDIA's DRA driver: driver, classes, attributes.

Manifests written against this test bed must work unchanged on NVIDIA's driver, so every name here
follows that driver (DESIGN.md section 3). Brand and architecture strings are derived from NVML's
enums the way NVIDIA's go-nvlib spells them, so a publisher needs nothing but NVML.
"""

from __future__ import annotations

import os
import re
import uuid
from dataclasses import dataclass
from typing import Mapping

DEFAULT_DRIVER = "gpu.nvidia.com"
DRIVER_ENV = "DRA_TESTBED_DRIVER_NAME"

# NVML_DEVICE_ARCH_* and NVML_BRAND_* values (nvml.h) -> the strings NVIDIA's driver publishes.
ARCHITECTURE_NAMES = {5: "Volta", 6: "Turing", 7: "Ampere", 8: "Ada Lovelace", 9: "Hopper", 10: "Blackwell"}  # NVML_DEVICE_ARCH_* (nvml.h) as go-nvlib spells them
BRAND_NAMES = {2: "Tesla", 14: "Nvidia"}


@dataclass(frozen=True)
class DriverIdentity:
    """The driver name and the DeviceClasses derived from it."""

    driver: str = DEFAULT_DRIVER

    @property
    def domain(self) -> str:
        """`nvidia.com` for `gpu.nvidia.com`: the classes share the driver's domain."""
        return self.driver.split(".", 1)[1] if "." in self.driver else self.driver

    @property
    def gpu_class(self) -> str:
        return f"gpu.{self.domain}"

    @property
    def mig_class(self) -> str:
        return f"mig.{self.domain}"

    @property
    def extended_resource(self) -> str:
        """`nvidia.com/gpu`: what device-plugin style pods ask for, served from the GPU class (DRAExtendedResource)."""
        return f"{self.domain}/gpu"

    def device_classes(self) -> list[dict]:
        """DeviceClass objects (resource.k8s.io/v1) selecting whole GPUs and MIG devices.

        The GPU class also names the extended resource, so a pod asking `nvidia.com/gpu: 1` gets a whole GPU
        through DRA; an apiserver without the DRAExtendedResource gate drops the field.
        """
        return [self._device_class(self.gpu_class, "gpu", self.extended_resource), self._device_class(self.mig_class, "mig")]

    def _device_class(self, name: str, kind: str, extended_resource: str | None = None) -> dict:
        expression = f"device.driver == '{self.driver}' && device.attributes['{self.driver}'].type == '{kind}'"
        spec: dict = {"selectors": [{"cel": {"expression": expression}}]}
        if extended_resource:
            spec["extendedResourceName"] = extended_resource
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "DeviceClass",
            "metadata": {"name": name, "labels": {"app.kubernetes.io/managed-by": "dra-testbed"}},
            "spec": spec,
        }


def current_identity(environ: Mapping[str, str] | None = None) -> DriverIdentity:
    """The identity in force: $DRA_TESTBED_DRIVER_NAME (of `environ`, else this process's) or gpu.nvidia.com."""
    return DriverIdentity((os.environ if environ is None else environ).get(DRIVER_ENV) or DEFAULT_DRIVER)


def semver(text: str) -> str:
    """A driver version such as 580.95.05 as a semantic version (580.95.5), as NVIDIA's driver publishes it."""
    parts = [str(int(p)) for p in text.split(".")[:3]]
    return ".".join(parts + ["0"] * (3 - len(parts)))


def cuda_version(encoded: int) -> str:
    """NVML's CUDA driver version (13000) as a semantic version (13.0.0)."""
    return f"{encoded // 1000}.{encoded % 1000 // 10}.0"


def gpu_uuid(node: str, index: int) -> str:
    """A stable GPU UUID for GPU `index` of `node`, in NVML's `GPU-<uuid>` form."""
    return "GPU-" + str(uuid.uuid5(uuid.NAMESPACE_URL, f"dra-testbed/{node}/gpu/{index}"))


def pci_bus_id(index: int) -> str:
    """The PCI bus id of GPU `index` (the 8-hex-digit domain form NVML returns)."""
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


# --- device and counter names (NVIDIA's dynamic-MIG naming, so claims and tooling see the same names) ---

_MIG_NAME = re.compile(r"^gpu-(?P<minor>\d+)-mig-(?P<profile>[a-z0-9-]+?)-(?P<id>\d+)-(?P<start>\d+)$")
_GPU_NAME = re.compile(r"^gpu-(?P<minor>\d+)$")


def gpu_device_name(minor: int) -> str:
    """`gpu-<minor>`: a whole GPU."""
    return f"gpu-{minor}"


def profile_token(profile: str) -> str:
    """A MIG profile name as it appears inside a device name: `1g.10gb+me` -> `1g10gb-me`."""
    token = re.sub(r"[^a-z0-9-]", "-", profile.lower().replace(".", ""))
    return token.strip("-")


def mig_device_name(minor: int, profile: str, profile_id: int, start: int) -> str:
    """`gpu-<minor>-mig-<profile>-<profile id>-<start>`: one MIG profile at the placement starting at memory
    slice `start`, as NVIDIA's driver names it (e.g. gpu-0-mig-3g40gb-9-4)."""
    return f"gpu-{minor}-mig-{profile_token(profile)}-{profile_id}-{start}"


@dataclass(frozen=True)
class DeviceRef:
    """What a device name says: the parent GPU's minor and, for MIG, profile token, profile id and start."""

    minor: int
    profile_token: str | None = None
    profile_id: int | None = None
    start: int | None = None

    @property
    def is_mig(self) -> bool:
        return self.profile_token is not None


def parse_device_name(name: str) -> DeviceRef:
    """Inverse of gpu_device_name / mig_device_name; ValueError for any other name."""
    if match := _GPU_NAME.match(name):
        return DeviceRef(int(match["minor"]))
    if match := _MIG_NAME.match(name):
        return DeviceRef(int(match["minor"]), match["profile"], int(match["id"]), int(match["start"]))
    raise ValueError(f"not a device name of this driver: {name!r}; expected gpu-<minor> or gpu-<minor>-mig-<profile>-<profile id>-<start>")


def counter_set_name(minor: int) -> str:
    """The shared counter set of GPU `minor` (dynamic MIG)."""
    return f"gpu-{minor}-counter-set"


def memory_slice_counter(index: int) -> str:
    """The counter of memory slice `index` (0..7)."""
    return f"memory-slice-{index}"


# Engine capacities of a device and the counters they consume, in NVIDIA's spelling.
CAPACITY_COUNTERS = {
    "multiprocessors": "multiprocessors",
    "copyEngines": "copy-engines",
    "decoders": "decoders",
    "encoders": "encoders",
    "jpegEngines": "jpeg-engines",
    "ofaEngines": "ofa-engines",
    "memory": "memory",
}
