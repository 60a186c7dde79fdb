"""The groups of the upstream DRA suite a spec belongs to, read from its full Ginkgo text."""

from __future__ import annotations

# Most specific first: a prioritized-list spec is also a kubelet spec; the first match names its group.
GROUPS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("device taints", ("DRADeviceTaints",)),
    ("consumable capacity", ("DRAConsumableCapacity",)),
    ("partitionable devices", ("DRAPartitionableDevices",)),
    ("prioritized list", ("DRAPrioritizedList",)),
    ("extended resources", ("DRAExtendedResource",)),
    ("v1beta1/v1beta2", ("v1beta1 API", "v1beta2 API")),
    ("kubelet", (" kubelet ",)),
)
CONTROL_PLANE = "control plane"  # everything without a kubelet: control plane, ResourceSlice controller, quota
ORDER = (CONTROL_PLANE, "kubelet", "prioritized list", "v1beta1/v1beta2", "partitionable devices",
         "consumable capacity", "device taints", "extended resources")


def group_of(name: str) -> str:
    """The group of the spec whose full text is `name`."""
    padded = f" {name} "
    for group, marks in GROUPS:
        if any(mark in padded for mark in marks):
            return group
    return CONTROL_PLANE
