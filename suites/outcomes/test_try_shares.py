"""What `try` says of a share of a GPU: what it took, which pods hold the other shares, what is left.

Allocation results in the form the API server returns them (status.allocation.devices.results with shareID and
consumedCapacity); the live check of the same lines is in test_sharing_examples_live.py."""

from __future__ import annotations

from decimal import Decimal

from testbed.outcomes.shares import share_of, share_text
from testbed.workloads.devices import Device, DeviceId

DRIVER = "gpu.nvidia.com"
GPU = Device(DeviceId(DRIVER, "n1", "gpu-0"), "n1", {}, {f"{DRIVER}/memory": Decimal(81559 * 2**20), f"{DRIVER}/shares": Decimal(4)},
             allow_multiple=True)


def claim(name: str, pod: str, share: str | None, consumed: dict[str, str], device: str = "gpu-0") -> dict:
    result = {"request": "gpu", "driver": DRIVER, "pool": "n1", "device": device, "consumedCapacity": consumed}
    if share:
        result["shareID"] = share
    return {"metadata": {"name": name, "namespace": "t"},
            "status": {"allocation": {"devices": {"results": [result]}},
                       "reservedFor": [{"resource": "pods", "name": pod, "uid": pod}]}}


def result_of(c: dict) -> dict:
    return c["status"]["allocation"]["devices"]["results"][0]


def test_a_share_names_the_pods_beside_it_and_what_is_left() -> None:
    claims = [claim("a", "pod-a", "s1", {"memory": "4Gi", "shares": "1"}), claim("b", "pod-b", "s2", {"memory": "10Gi", "shares": "2"}),
              claim("c", "pod-c", "s3", {"memory": "1Gi", "shares": "1"}, device="gpu-1"),  # another GPU
              claim("d", "pod-d", None, {})]  # not a share
    share = share_of(result_of(claims[0]), GPU, claims)
    assert share is not None and share.others == ("pod-b",)
    assert share.took == {"memory": Decimal(4 * 2**30), "shares": Decimal(1)}
    assert share.left == {"memory": Decimal(81559 * 2**20 - 14 * 2**30), "shares": Decimal(1)}
    assert share_text(share) == "shared: took memory 4Gi, shares 1; with pod-b; left memory 65.6Gi, shares 1"


def test_a_whole_allocation_is_no_share_and_a_lone_share_says_so() -> None:
    lone = claim("a", "pod-a", "s1", {"memory": "4Gi"})
    assert share_of(result_of(claim("d", "pod-d", None, {})), GPU, [lone]) is None
    assert share_text(share_of(result_of(lone), GPU, [lone])) == "shared: took memory 4Gi; alone on it; left memory 75.6Gi"
