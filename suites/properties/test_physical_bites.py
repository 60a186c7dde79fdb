"""The machines judge NVML, not only the API: with `nvml-chooses-placement` on, our plugin makes each dynamic
MIG device where NVML puts a new instance of its profile instead of at the allocated placement. The API side
(slices, allocations) stays right, so only the physical check (testbed/workloads/physical_watch.py, the
runner's node check on KWOK beds) can see it; the MIG machine must raise a `physical` violation within a
bounded number of examples (without the fault the same machine passes: test_repartitioning.py).
"""

from __future__ import annotations

import os

import pytest
from hypothesis import Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from fake_gpus.driver.faults import FAULTS_ENV, NVML_PLACES_FAULT, fault_env
from suites.properties.conftest import FAULT_LAYOUT, bring_up
from testbed.workloads.machine import allocation_machine
from testbed.workloads.physical import PHYSICAL
from testbed.workloads.runner import PropertyFailure

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
FULL_ENV = "DRA_TESTBED_EVOLUTION"  # "full": with the generated evolution machine in `nox -s evolution`

BOARD = "h100-80gb"  # FAULT_LAYOUT's one partitionable GPU
# no shrinking: the failure, not the minimal case, is what is asserted; a few short examples are the bound
BOUNDED = settings(max_examples=6, stateful_step_count=5, phases=(Phase.explicit, Phase.generate), database=None, deadline=None)


def _machine(bed, tmp_path, context: dict, stats: dict):
    return allocation_machine(bed.api, bed.layout_yaml, tmp_path / "bundle", boards=(BOARD,), mig_percent=90, context=context,
                              stats=stats, runner_fields=bed.machine_fields())


# The same machine passing without the fault is test_repartitioning.py's MIG machine, which runs this check too;
# `None` stays here for a side-by-side run when the judge changes (DRA_TESTBED_PHYSICAL_CLEAN=1).
@pytest.mark.parametrize("fault", [NVML_PLACES_FAULT] + ([None] if os.environ.get("DRA_TESTBED_PHYSICAL_CLEAN") else []),
                         ids=lambda f: "fault" if f else "clean")
def test_mig_machine_judges_nvml_placement(fault: str | None, request, tmp_path) -> None:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("the generated MIG machine under nvml-chooses-placement runs in `nox -s evolution`")  # allowed in suites/skips.yaml
    env = fault_env([fault]) if fault else None
    bed_iter = bring_up(request, FAULT_LAYOUT, f"physical-{fault or 'clean'}", env=env)
    bed = next(bed_iter)
    stats: dict[str, int] = {}
    try:
        assert bed.nvml_home is not None, "the physical check needs a KWOK bed (local node state)"
        machine = _machine(bed, tmp_path, {"faults": env[FAULTS_ENV]} if env else {}, stats)
        if fault is None:
            run_state_machine_as_test(machine, settings=BOUNDED)
            assert stats.get("node-checks", 0) > 0 and stats.get("scheduled", 0) > 0, stats
            return
        with pytest.raises(PropertyFailure) as failure:
            run_state_machine_as_test(machine, settings=BOUNDED)
        physical = [v for v in failure.value.violations if v.property == PHYSICAL]
        assert physical, failure.value
        assert "not prepared for any claim" in physical[0].message, physical[0].message
    finally:
        print(f"physical machine ({fault or 'clean'}): {stats}")
        next(bed_iter, None)  # tear the cluster down
