"""The property machines on NVIDIA's own slices: a KWOK bed whose nodes are served by NVIDIA's
gpu-kubelet-plugin (whole GPUs and dynamic MIG), the real scheduler allocating, every step checked
against the reference model over the slices NVIDIA's driver published.

In `nox -s tests` a smoke (SMOKE settings: a few short examples on one bed); with
$DRA_TESTBED_NVIDIA_PROPERTIES=full (`nox -s properties_nvidia`) the Hypothesis profile's own settings.
The binary is found as testbed/drivers/nvidia/binary.py says; without one these fail in one line, never skip.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from suites.nvidia.conftest import required_plugin
from suites.properties.conftest import PropertyBed, bring_up, bundle_dir
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.workloads.machine import allocation_machine
from testbed.workloads.scenarios import partition_churn, partition_churn_cases, partitionable_nodes
from testbed.workloads.upstream import all_in_later_alternative_works

pytestmark = pytest.mark.cluster

FULL_ENV = "DRA_TESTBED_NVIDIA_PROPERTIES"
FULL = os.environ.get(FULL_ENV) == "full"
SMOKE = settings(max_examples=6, stateful_step_count=6)
# Whole GPUs of two boards and partitionable GPUs of two: NVIDIA's plugin publishes every node.
NVIDIA_LAYOUT = Layout((
    NodeSpec("nv-whole-h100", "h100-80gb", 2, Mode("whole")),
    NodeSpec("nv-whole-b200", "b200-180gb", 1, Mode("whole")),
    NodeSpec("nv-dyn-h100", "h100-80gb", 1, Mode("dynamic-mig")),
    NodeSpec("nv-dyn-h200", "h200-141gb", 1, Mode("dynamic-mig")),
), name="properties-nvidia")


@pytest.fixture(scope="module")
def nvidia_bed(request: pytest.FixtureRequest) -> Iterator[PropertyBed]:
    binary = required_plugin(request.config)
    # twice: on a loaded machine the controller-manager has been seen to give up on a slow apiserver at start
    yield from bring_up(request, NVIDIA_LAYOUT, "nvidia", driver=DriverSpec("nvidia", path=str(binary)), attempts=2)


@pytest.fixture(scope="module")
def nvidia_partitionable(nvidia_bed: PropertyBed) -> dict[str, str]:
    nodes = partitionable_nodes(nvidia_bed.api)
    wanted = {n.name for n in NVIDIA_LAYOUT.nodes if n.mode.kind == "dynamic-mig"}
    assert set(nodes) == wanted, f"NVIDIA's partitionable nodes {sorted(nodes)}, the layout has {sorted(wanted)}"
    return nodes


def _run(machine) -> None:
    run_state_machine_as_test(machine, settings=None if FULL else SMOKE)


def test_arrivals_and_departures_on_nvidias_slices(nvidia_bed, nvidia_partitionable, request) -> None:
    """Whole-GPU and MIG claims (60% MIG) over every node: soundness, completeness, fallback, liveness."""
    stats: dict[str, int] = {}
    boards = tuple(sorted(set(nvidia_partitionable.values())))
    machine = allocation_machine(nvidia_bed.api, nvidia_bed.layout_yaml, bundle_dir(nvidia_bed, request), boards=boards,
                                 mig_percent=60, stats=stats, all_in_fallback=all_in_later_alternative_works(nvidia_bed.api),
                                 runner_fields=nvidia_bed.machine_fields(stats))
    _run(machine)
    print(f"NVIDIA machine: {stats}")
    assert stats.get("scheduled", 0) > 0, f"no example scheduled a pod: the properties were never exercised ({stats})"


@pytest.mark.skipif(not FULL, reason=f"the full NVIDIA properties run with ${FULL_ENV}=full (nox -s properties_nvidia)")
def test_arrivals_and_departures_on_nvidias_whole_gpus(nvidia_bed, request) -> None:
    stats: dict[str, int] = {}
    machine = allocation_machine(nvidia_bed.api, nvidia_bed.layout_yaml, bundle_dir(nvidia_bed, request), stats=stats,
                                 all_in_fallback=all_in_later_alternative_works(nvidia_bed.api),
                                 runner_fields=nvidia_bed.machine_fields(stats))
    _run(machine)
    assert stats.get("scheduled", 0) > 0, f"no example scheduled a pod ({stats})"


@pytest.mark.skipif(not FULL, reason=f"the full NVIDIA properties run with ${FULL_ENV}=full (nox -s properties_nvidia)")
@given(data=st.data())
def test_nvidias_partitions_are_released_whole(nvidia_bed, nvidia_partitionable, request, data) -> None:
    case = data.draw(partition_churn_cases(nvidia_partitionable), label="case")
    partition_churn(nvidia_bed.api, nvidia_bed.layout_yaml, bundle_dir(nvidia_bed, request), case)
