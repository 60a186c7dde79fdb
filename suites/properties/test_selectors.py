"""Selectors render to CEL the scheduler evaluates exactly as the model's predicate does."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import current_identity
from suites.properties.conftest import bundle_dir
from testbed.workloads.scenarios import memory_selector, memory_selector_cases
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.runner import Runner
from testbed.workloads.strategies import gpu_atoms, selectors

pytestmark = pytest.mark.cluster
BOARDS = ("h100-80gb", "h200-141gb", "b200-180gb")


@given(selector=selectors(gpu_atoms(BOARDS)), all_devices=st.booleans())
def test_selector_agreement(whole_bed, request, selector, all_devices) -> None:
    """A pod selecting GPUs is scheduled exactly when the model finds a match, on devices that match."""
    runner = Runner(whole_bed.api, whole_bed.layout_yaml, bundle_dir=bundle_dir(whole_bed, request)).open()
    try:
        claim = ClaimSpec((Request("r0", (SubRequest("r0", current_identity().gpu_class, (selector,), all_devices=all_devices),)),))
        runner.arrive(PodSpec("p0", (PodClaim("t0", template=claim),)))
    finally:
        runner.close()


@given(case=memory_selector_cases([get_board(b).memory_mib for b in BOARDS]))
def test_memory_selectors_hold_on_real_facts(whole_bed, request, case) -> None:
    memory_selector(whole_bed.api, whole_bed.layout_yaml, bundle_dir(whole_bed, request), case, current_identity().gpu_class)
