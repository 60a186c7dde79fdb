"""Known bugs of the scheduler's allocator that the properties found, by Kubernetes minor.

Generators steer around a known bug on the minors that have it (so the suites keep testing everything
else there), and a regression test pins each bug: it must fail where the bug is, and pass where fixed.
"""

from __future__ import annotations

from kubernetes import client

from fake_gpus.driver.slices import server_minor

# k8s.io/dynamic-resource-allocation structured allocator, 1.34 and 1.35: when a firstAvailable
# alternative other than the first uses allocationMode All, the recursion over "all" devices drops the
# subrequest index and continues with the first alternative's device count, so the claim is allocated
# fewer devices than All means (seen: 1 of 2 matching GPUs). Fixed in 1.36 (subRequestIndex is kept).
ALL_IN_LATER_ALTERNATIVE_FIXED = (1, 36)
# The same allocator, 1.35 (1.34.4 counts the same way; another of its bugs hides it): the counters of a
# device that allows multiple allocations are counted only while the scheduler allocates it, never once a
# share of it is allocated (the allocated state's devices are `AllocatedDevices`, which shares are not part
# of), so a MIG device of a GPU whose full device is shared can be allocated in a later cycle: one GPU, shared
# whole and partitioned at once. 1.36 counts a device with an allocated share (internal.IsDeviceAllocated)
# and consumes its counters once, on its first share.
SHARED_COUNTERS_HELD_FIXED = (1, 36)


def served_version(api: client.ApiClient) -> tuple[int, int]:
    """(major, minor) of the API server, e.g. (1, 35)."""
    major, minor = server_minor(client.VersionApi(api).get_code()).split(".")
    return int(major), int(minor)


def all_in_later_alternative_works(api: client.ApiClient) -> bool:
    return served_version(api) >= ALL_IN_LATER_ALTERNATIVE_FIXED


def shared_counters_held(api: client.ApiClient) -> bool:
    return served_version(api) >= SHARED_COUNTERS_HELD_FIXED
