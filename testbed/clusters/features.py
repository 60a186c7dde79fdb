"""Feature gates and served API versions per Kubernetes minor, so every DRA feature the suites use is on.

Read off each pinned release: the gates its DRA e2e specs name (`framework.WithFeatureGate`) that
pkg/features/kube_features.go has off by default, and the API versions its test/e2e/dra/kind.yaml serves
(suites/unit/test_layout_and_features.py checks both against the release). Gates that are GA and locked are
left alone (setting a locked gate is a warning today and an error once the gate is removed).
"""

from __future__ import annotations

from hostenv.versions import release_for

# minor -> gates to switch on explicitly (off by default, or beta and worth pinning on)
FEATURE_GATES: dict[str, tuple[str, ...]] = {
    # 1.34: partitionable devices, taints, consumable capacity, extended resources (nvidia.com/gpu served
    # through DRA) are alpha (default off)
    "1.34": ("DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity", "DRAExtendedResource"),
    # 1.35: the same four still alpha; DRADeviceTaintRules split off as its own alpha gate
    "1.35": ("DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity", "DRAExtendedResource",
             "DRADeviceTaintRules"),
    # 1.36: beta and on by default except DRADeviceTaintRules (beta, default off); new alpha: pool status,
    # claims of a Workload (which needs the alpha Workload API, GenericWorkload)
    "1.36": ("DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity", "DRAExtendedResource",
             "DRADeviceTaintRules", "DRAResourcePoolStatus", "DRAWorkloadResourceClaims", "GenericWorkload"),
    # 1.37: partitionable devices and consumable capacity still beta; taints and extended resources GA;
    # Workload claims beta but off; new alpha: compatibility groups, optional node operations, the
    # partitionable devices type (needs pool status); list-type attributes (alpha since 1.36, named by no DRA e2e
    # spec; NVIDIA's driver publishes numaNode as a list under its gate of the same name)
    "1.37": ("DRAPartitionableDevices", "DRAConsumableCapacity", "DRAResourcePoolStatus", "DRAWorkloadResourceClaims",
             "GenericWorkload", "DRADeviceCompatibilityGroups", "DRAOptionalNodeOperations", "DRAPartitionableDevicesType",
             "DRAListTypeAttributes"),
    # 1.38 (v1.38.0-beta.0): partitionable devices GA and locked, consumable capacity and fractional capacity
    # ranges GA (unlocked, on), binding conditions GA and locked, taints and taint rules now locked; Workload
    # claims and GenericWorkload still beta but off; new alpha its DRA e2e specs name: node allocatable resources
    "1.38": ("DRAResourcePoolStatus", "DRAWorkloadResourceClaims", "GenericWorkload", "DRADeviceCompatibilityGroups",
             "DRAOptionalNodeOperations", "DRAPartitionableDevicesType", "DRANodeAllocatableResources"),
}

# Every pinned minor registers these resource.k8s.io versions; only v1 is served by default.
RESOURCE_API_VERSIONS = ("v1beta1", "v1beta2", "v1alpha3")
# minor -> further off-by-default API versions its gates need: the Workload API of GenericWorkload
EXTRA_API_VERSIONS: dict[str, tuple[str, ...]] = {
    "1.36": ("scheduling.k8s.io/v1alpha2",),
    "1.37": ("scheduling.k8s.io/v1beta1",),
    "1.38": ("scheduling.k8s.io/v1beta1",),
}


def feature_gates(minor: str) -> dict[str, bool]:
    """Gates to pass to apiserver, controller-manager, scheduler and kubelet of `minor`."""
    return {gate: True for gate in FEATURE_GATES[release_for(minor).minor]}


def runtime_config(minor: str) -> dict[str, bool]:
    """--runtime-config entries for the apiserver of `minor`."""
    key = release_for(minor).minor
    versions = [f"resource.k8s.io/{version}" for version in RESOURCE_API_VERSIONS] + list(EXTRA_API_VERSIONS.get(key, ()))
    return {version: True for version in versions}


def as_flag(values: dict[str, bool]) -> str:
    """`A=true,B=false` as component flags take it."""
    return ",".join(f"{key}={'true' if on else 'false'}" for key, on in values.items())
