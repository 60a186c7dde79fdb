"""The real scheduler allocating from the publisher's slices on KWOK: whole GPUs, static and dynamic MIG."""

from __future__ import annotations

import pytest

from driver_helpers import IDENTITY, attr, gpu_pod, mig_pod, scheduled, unschedulable, wait_pod
from fake_gpus.catalog import get_board

pytestmark = pytest.mark.cluster


def test_whole_gpu_claim_by_product_name(bed_namespace) -> None:
    bed, ns = bed_namespace
    b200 = get_board("b200-180gb").product_name
    pod = gpu_pod(bed, ns, "whole-b200", f"{attr('productName')} == '{b200}'")
    wait_pod(bed, ns, pod, scheduled, "scheduled")
    claim = bed.resource.list_namespaced_resource_claim(ns).items[0]
    (result,) = claim.status.allocation.devices.results
    assert (result.driver, result.pool) == (IDENTITY.driver, "whole-b200")
    assert result.device in {"gpu-0", "gpu-1"}
    # the same product is not on the H100 node: pinned there, the claim stays pending
    other = gpu_pod(bed, ns, "whole-h100", f"{attr('productName')} == '{b200}'")
    wait_pod(bed, ns, other, unschedulable, "unschedulable")


def test_mig_claim_by_profile_in_static_mode(bed_namespace) -> None:
    bed, ns = bed_namespace
    # all-balanced on an H100: 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb exist; ask for both 1g.10gb
    pod = mig_pod(bed, ns, "static-h100", "1g.10gb", "1g.10gb")
    wait_pod(bed, ns, pod, scheduled, "scheduled")
    results = bed.resource.list_namespaced_resource_claim(ns).items[0].status.allocation.devices.results
    devices = {r.device for r in results}
    assert len(devices) == 2 and all("-mig-1g10gb-" in d for d in devices), devices
    # a third 1g.10gb does not exist in that layout
    third = mig_pod(bed, ns, "static-h100", "1g.10gb")
    wait_pod(bed, ns, third, unschedulable, "unschedulable")
    # a profile the layout lacks stays pending too
    missing = mig_pod(bed, ns, "static-h100", "4g.40gb")
    wait_pod(bed, ns, missing, unschedulable, "unschedulable")


def test_dynamic_mig_on_one_h100(bed_namespace) -> None:
    bed, ns = bed_namespace
    node = "dyn-h100"
    # 4g.40gb has one placement (slices 0-3); the 3g.40gb must then take 4-7
    four = mig_pod(bed, ns, node, "4g.40gb")
    wait_pod(bed, ns, four, scheduled, "4g.40gb scheduled")
    three = mig_pod(bed, ns, node, "3g.40gb")
    wait_pod(bed, ns, three, scheduled, "3g.40gb scheduled")
    one = mig_pod(bed, ns, node, "1g.10gb")
    full = gpu_pod(bed, ns, node)
    wait_pod(bed, ns, one, unschedulable, "1g.10gb pending while every memory slice is taken")
    wait_pod(bed, ns, full, unschedulable, "full GPU pending")
    # freeing the 4g.40gb frees slices 0-3: the 1g.10gb fits, the full GPU still does not
    bed.core.delete_namespaced_pod(four, ns, grace_period_seconds=0)
    pod = wait_pod(bed, ns, one, scheduled, "1g.10gb scheduled once the 4g.40gb is gone")
    assert pod.spec.node_name == node
    assert not bed.core.read_namespaced_pod(full, ns).spec.node_name
    # freeing everything lets the full GPU through
    for name in (three, one):
        bed.core.delete_namespaced_pod(name, ns, grace_period_seconds=0)
    wait_pod(bed, ns, full, scheduled, "full GPU scheduled once all partitions are gone")
    claims = [c for c in bed.resource.list_namespaced_resource_claim(ns).items if c.status.allocation]
    assert [r.device for c in claims for r in c.status.allocation.devices.results] == ["gpu-0"]
