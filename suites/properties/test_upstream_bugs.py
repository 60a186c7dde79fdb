"""Allocator bugs the properties found, pinned as fixed cases: they must fail where the bug is known
and pass where it is fixed (a strict xfail turns "suddenly passes" into a failure too)."""

from __future__ import annotations

import pytest

from fake_gpus.driver.identity import current_identity
from suites.properties.conftest import bundle_dir
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.runner import PropertyFailure, Runner
from testbed.workloads.selectors import StringIs
from testbed.workloads.upstream import all_in_later_alternative_works

pytestmark = pytest.mark.cluster


def test_all_in_a_later_first_available_alternative_takes_every_device(whole_bed, request) -> None:
    """firstAvailable [no such product, All Hopper H100s]: the second alternative must get both H100s."""
    if not all_in_later_alternative_works(whole_bed.api):
        request.applymarker(pytest.mark.xfail(raises=PropertyFailure, strict=True,
                                              reason="1.34/1.35 allocator drops the subrequest index for All (fixed in 1.36)"))
    gpu = current_identity().gpu_class
    claim = ClaimSpec((Request("r0", (
        SubRequest("s0", gpu, (StringIs("productName", "NVIDIA A100-SXM4-80GB"),)),
        SubRequest("s1", gpu, (StringIs("productName", "NVIDIA H100 80GB HBM3"),), all_devices=True),
    ), first_available=True),))
    runner = Runner(whole_bed.api, whole_bed.layout_yaml, bundle_dir=bundle_dir(whole_bed, request)).open()
    try:
        runner.arrive(PodSpec("p0", (PodClaim("t0", template=claim),)))
    finally:
        runner.close()
