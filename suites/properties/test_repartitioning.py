"""Dynamic MIG on the real scheduler: partitions are disjoint (every profile beside the finest, once per run),
fallback picks the first that fits, and a board whose partitions are all released takes full-GPU claims
again with its counters back at zero."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from suites.properties.conftest import bundle_dir
from testbed.workloads.machine import allocation_machine
from testbed.workloads.overlap import overlap_sweep, overlap_sweep_cases, sweep_examples
from testbed.workloads.upstream import all_in_later_alternative_works
from testbed.workloads.scenarios import partition_churn, partition_churn_cases

pytestmark = pytest.mark.cluster


@given(data=st.data())
def test_partitions_are_released_whole(dynamic_bed, dynamic_nodes, request, data) -> None:
    case = data.draw(partition_churn_cases(dynamic_nodes), label="case")
    partition_churn(dynamic_bed.api, dynamic_bed.layout_yaml, bundle_dir(dynamic_bed, request), case)


def test_arrivals_and_departures_on_mig(dynamic_bed, dynamic_nodes, request) -> None:
    stats: dict[str, int] = {}
    boards = tuple(sorted(set(dynamic_nodes.values())))
    machine = allocation_machine(dynamic_bed.api, dynamic_bed.layout_yaml, bundle_dir(dynamic_bed, request),
                                 boards=boards, mig_percent=60, stats=stats,
                                 all_in_fallback=all_in_later_alternative_works(dynamic_bed.api),
                                 runner_fields=dynamic_bed.machine_fields(stats))
    run_state_machine_as_test(machine)
    print(f"MIG machine: {stats}")
    assert stats.get("scheduled", 0) > 0, f"no example scheduled a pod: the properties were never exercised ({stats})"


@settings(max_examples=sweep_examples(settings.default.max_examples))
@given(data=st.data())
def test_every_partition_meets_the_finest(dynamic_bed, dynamic_nodes, request, data) -> None:
    """Every profile and the full GPU, on every partitionable GPU, shares a claim with a one-slice partition:
    a profile that under-declares a memory slice overlaps it physically (benchmarks/overlap_power.py)."""
    probes = data.draw(overlap_sweep_cases(dynamic_nodes), label="probes")
    overlap_sweep(dynamic_bed.api, dynamic_bed.layout_yaml, bundle_dir(dynamic_bed, request), probes)
