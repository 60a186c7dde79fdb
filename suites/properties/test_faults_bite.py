"""Each publisher fault switch makes the matching property fail: the properties can bite.

One cluster per fault (a partitionable H100 published with the fault on); the property runs under
Hypothesis without shrinking (the failure, not the minimal case, is what is asserted) and must raise
PropertyFailure naming the right property. One bundle is replayed through `dra-testbed replay`, which
must exit 1 because the bundle records the fault.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import Phase, given, seed, settings

from fake_gpus.catalog import get_board
from fake_gpus.driver.faults import FAULTS_ENV, fault_env
from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.slices import WRONG_MEMORY_FACTOR
from hostenv.processes import run_child
from suites.properties.conftest import FAULT_LAYOUT, bring_up
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.workloads.corpus import GIB, VRAM_CASES, churn_cases
from testbed.workloads.overlap import overlap_sweep, overlap_sweep_cases
from testbed.workloads.scenarios import memory_selector, memory_selector_cases, partition_churn, partition_churn_cases
from testbed.workloads.runner import PropertyFailure

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NODE, BOARD = "dyn-h100", "h100-80gb"
# fault -> the property run against it
PROPERTIES = {
    "oversized-counters": "partition_churn",
    "short-placement": "partition_churn",
    "wrong-memory": "memory_selector",
}
BITE = settings(max_examples=40, phases=(Phase.explicit, Phase.generate), database=None, deadline=None,
                suppress_health_check=list(settings().suppress_health_check))


def _run(fault: str, bed, bundle: Path) -> None:
    context = {"faults": fault_env([fault])[FAULTS_ENV]}

    if PROPERTIES[fault] == "partition_churn":
        @BITE
        @given(case=partition_churn_cases({NODE: BOARD}))
        def prop(case):
            partition_churn(bed.api, bed.layout_yaml, bundle, case, context)
    else:
        @BITE
        @given(case=memory_selector_cases([81559]))
        def prop(case):
            memory_selector(bed.api, bed.layout_yaml, bundle, case, current_identity().gpu_class, context)
    prop()


@pytest.mark.parametrize("fault", sorted(PROPERTIES))
def test_property_fails_with_fault(fault: str, request, tmp_path) -> None:
    bed_iter = bring_up(request, FAULT_LAYOUT, f"fault-{fault}", env=fault_env([fault]))
    bed = next(bed_iter)
    bundle = tmp_path / "bundle"
    try:
        with pytest.raises(PropertyFailure) as failure:
            _run(fault, bed, bundle)
        assert any(v.property == "soundness" for v in failure.value.violations), failure.value
        assert (bundle / "steps.json").is_file() and (bundle / "violations.json").is_file()
    finally:
        next(bed_iter, None)  # tear the cluster down
    if fault == "short-placement":
        # the bundle replays on a fresh cluster with the recorded fault and still fails
        replay = run_child([sys.executable, "-m", "testbed.cli", "replay", str(bundle)], capture_output=True, text=True, timeout=600)
        assert replay.returncode == 1, replay.stderr[-2000:]
        assert "still failing" in replay.stderr


# held out by benchmarks/overlap_power.py's recorded seed (never tuned for), and of FAULT_LAYOUT's board (H100)
SWEEP_FAULT = "underdeclared-3g40gb-first"


def test_overlap_sweep_catches_a_held_out_underdeclared_profile(request, tmp_path) -> None:
    """The short form of benchmarks/overlap_power.py: the sweep finds the overlap under three seeds."""
    bed_iter = bring_up(request, FAULT_LAYOUT, "fault-sweep", env=fault_env([SWEEP_FAULT]))
    bed = next(bed_iter)
    try:
        for s in range(3):
            @seed(s)
            @settings(BITE, max_examples=1)
            @given(probes=overlap_sweep_cases({NODE: BOARD}))
            def sweep(probes):
                overlap_sweep(bed.api, bed.layout_yaml, tmp_path / f"seed-{s}", probes, {"faults": SWEEP_FAULT})
            with pytest.raises(PropertyFailure) as failure:
                sweep()
            assert any("memory slice" in v.message for v in failure.value.violations), failure.value
    finally:
        next(bed_iter, None)  # tear the cluster down


# The theme corpus under the faults its cases name: a partitionable H100 and whole H100 and H200 GPUs.
THEME_LAYOUT = Layout((
    NodeSpec("dyn-h100", "h100-80gb", 1, Mode("dynamic-mig")),
    NodeSpec("h100-0", "h100-80gb", 1, Mode("whole")),
    NodeSpec("h200-0", "h200-141gb", 1, Mode("whole")),
), name="properties-theme-fault")


def _pushed_over(board_key: str, gib: int) -> bool:
    """The board really is under `gib` GiB, and published at the wrong-memory fault's multiple it is not."""
    memory = get_board(board_key).memory_mib
    return memory < gib * GIB <= WRONG_MEMORY_FACTOR * memory


THEME_FAULTS = sorted({c.fault for c in VRAM_CASES} | {c.fault for c in churn_cases({NODE: BOARD})})


@pytest.mark.parametrize("fault", THEME_FAULTS)
def test_theme_corpus_cases_fail_with_their_fault(fault: str, request, tmp_path) -> None:
    """Every corpus case naming `fault` fails with a soundness violation once the driver has it on."""
    bed_iter = bring_up(request, THEME_LAYOUT, f"theme-{fault}", env=fault_env([fault]))
    bed = next(bed_iter)
    context = {"faults": fault}
    # Pinned to each whole GPU the fault pushes over the boundary: unpinned, the scheduler may pick a board
    # that really is that big, and the claim is then rightly satisfied (CI's wrong-memory 80 GiB case got the H200).
    runs = [(f"{c.gib}GiB-{spec.name}", lambda b, c=c, n=spec.name: memory_selector(
                bed.api, bed.layout_yaml, b, c.case, current_identity().gpu_class, context, node=n))
            for c in VRAM_CASES if c.fault == fault
            for spec in THEME_LAYOUT.nodes if spec.mode.kind == "whole" and _pushed_over(spec.board, c.gib)]
    runs += [(c.name, lambda b, c=c: partition_churn(bed.api, bed.layout_yaml, b, c.case, context))
             for c in churn_cases({NODE: BOARD}) if c.fault == fault]
    assert runs, f"no corpus case names {fault}"
    try:
        for name, run in runs:
            with pytest.raises(PropertyFailure) as failure:
                run(tmp_path / name)
            assert any(v.property == "soundness" for v in failure.value.violations), f"{name}: {failure.value}"
    finally:
        next(bed_iter, None)  # tear the cluster down
