"""Arrivals and departures on whole GPUs: soundness, completeness, fallback and liveness on the real scheduler."""

from __future__ import annotations

import pytest
from hypothesis.stateful import run_state_machine_as_test

from suites.properties.conftest import bundle_dir
from testbed.workloads.machine import allocation_machine
from testbed.workloads.upstream import all_in_later_alternative_works

pytestmark = pytest.mark.cluster


def test_arrivals_and_departures_on_whole_gpus(whole_bed, request) -> None:
    stats: dict[str, int] = {}
    machine = allocation_machine(whole_bed.api, whole_bed.layout_yaml, bundle_dir(whole_bed, request), stats=stats,
                                 all_in_fallback=all_in_later_alternative_works(whole_bed.api),
                                 runner_fields=whole_bed.machine_fields(stats))
    run_state_machine_as_test(machine)
    print(f"whole-GPU machine: {stats}")
    assert stats.get("scheduled", 0) > 0, f"no example scheduled a pod: the properties were never exercised ({stats})"
