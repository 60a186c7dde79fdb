"""Which devices a GPU offers in dynamic-MIG mode, decided per GPU as NVIDIA's gpu-kubelet-plugin decides.

NVIDIA's rule (cmd/gpu-kubelet-plugin/nvlib.go of dra-driver-nvidia-gpu, pinned commit 95932046:
GetPerGpuAllocatableDevices, isDynamicMIGCapable, supportsMIGModeToggle):

- a GPU without MIG (L4, L40S, T4) is offered whole, as without the DynamicMIG gate;
- Hopper and newer toggle MIG mode without a GPU reset: the full GPU and every profile x placement;
- Ampere (A100, A30) needs a reset to toggle MIG mode, which the driver never does: with MIG mode off the
  GPU is offered whole only, with MIG mode on (an admin turned it on) only its profile x placements.
"""

from __future__ import annotations

from dataclasses import dataclass

# NVML_DEVICE_ARCH_HOPPER (nvml.h): the first architecture that changes MIG mode without a GPU reset
FIRST_RESETLESS_MIG_ARCHITECTURE = 9


@dataclass(frozen=True)
class DynamicOffer:
    """What one GPU publishes in dynamic-MIG mode."""

    full_gpu: bool
    partitions: bool  # every profile x placement, and the GPU's counter set they consume from


def mig_toggles_without_reset(nvml_architecture: int) -> bool:
    """Whether NVML can switch MIG mode on this architecture while the GPU stays up (Hopper and newer)."""
    return nvml_architecture >= FIRST_RESETLESS_MIG_ARCHITECTURE


def dynamic_offer(mig_capable: bool, mig_enabled: bool, nvml_architecture: int) -> DynamicOffer:
    """The devices of a GPU with these facts under dynamic MIG."""
    if not mig_capable:
        return DynamicOffer(full_gpu=True, partitions=False)
    if mig_toggles_without_reset(nvml_architecture):
        return DynamicOffer(full_gpu=True, partitions=True)
    return DynamicOffer(full_gpu=not mig_enabled, partitions=mig_enabled)
