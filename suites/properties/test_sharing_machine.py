"""Arrivals and departures on shared GPUs (consumable capacity): the real scheduler's shares checked against the
model's per-device capacity at every step.

Pods asking memory and shares of a GPU arrive beside the selector-probing pods, several land on one GPU, and
departures give capacity back: soundness (no GPU holds more than it has, published or real; each share rounded
as the allocator rounds), completeness (what fits, capacity given back included, is scheduled) and liveness.
(`shares-exceed-device`, a policy letting one claim take twice the board's memory, never reaches a live bed: the
API server refuses such slices; the check that judges it, truth.shared_memory_violations, is proven on hand-made
slices in test_oracle_sharing.py.)
"""

from __future__ import annotations

import time

import pytest
from hypothesis.stateful import run_state_machine_as_test

from suites.properties.conftest import PropertyBed, bring_up, bundle_dir
from testbed.workloads.machine import allocation_machine
from testbed.workloads.profiles import SHARED_LAYOUT, SHARED_MIG_LAYOUT
from testbed.workloads.sharing_strategies import capacity_pod_specs
from testbed.workloads.upstream import SHARED_COUNTERS_HELD_FIXED, all_in_later_alternative_works

# On a bed of 1.35 or newer (see FIRST_SOUND_MINOR), so with the tests of the second minor (`nox -s second-minor`):
# `nox -s tests` builds only the default minor. Its smoke of sharing there: the model's unit tests
# (test_oracle_sharing.py), the conformance checks sched.shared-capacity and shares.published, the examples.
pytestmark = [pytest.mark.cluster, pytest.mark.second_minor]

BOARDS = tuple(sorted({n.board for n in SHARED_LAYOUT.nodes}))
# The 1.34 allocator (v1.34.4) checks a shared device's capacity on the slice's device at the index of the pick
# within its request (r.deviceIndex), not on the device picked: every share is judged by the first devices of
# the slice, and a third pick from a slice of two GPUs panics kube-scheduler (index out of range [2] with length
# 2, allocator_experimental.go:1142; the scheduler exits). 1.35 passes the device itself. Seen in this machine's
# first runs on 1.34.4; so shared beds run at least 1.35.
FIRST_SOUND_MINOR = (1, 35)


def _minor(request: pytest.FixtureRequest, first: tuple[int, int] = FIRST_SOUND_MINOR) -> str:
    asked = tuple(int(p) for p in request.config.option.k8s.split("."))
    return ".".join(map(str, max(asked, first)))


@pytest.fixture(scope="module")
def shared_bed(request: pytest.FixtureRequest):
    """A cluster (KWOK unless --backend) whose GPUs are shared: shares of 4, and memory shares."""
    yield from bring_up(request, SHARED_LAYOUT, "shared", k8s=_minor(request))


def _machine(bed: PropertyBed, request, stats: dict, mig_percent: int = 0, boards: tuple[str, ...] = BOARDS):
    return allocation_machine(bed.api, bed.layout_yaml, bundle_dir(bed, request), boards=boards, mig_percent=mig_percent, stats=stats,
                              all_in_fallback=all_in_later_alternative_works(bed.api),
                              capacity_strategy=capacity_pod_specs)


def test_arrivals_and_departures_on_shared_gpus(shared_bed, request) -> None:
    stats: dict[str, int] = {}
    start = time.monotonic()
    run_state_machine_as_test(_machine(shared_bed, request, stats))
    minutes = (time.monotonic() - start) / 60
    print(f"shared-GPU machine: {stats}; {stats.get('examples', 0) / minutes:.1f} examples per minute")
    assert stats.get("co-located", 0) > 0, f"no example put two claims on one GPU: sharing was never exercised ({stats})"



@pytest.fixture(scope="module")
def shared_mig_bed(request: pytest.FixtureRequest):
    """Partitionable GPUs whose full and MIG devices are shareable: 1.36 or newer, whose allocator holds a shared
    device's counters (testbed/workloads/upstream.py SHARED_COUNTERS_HELD_FIXED; 1.35's hands a MIG device of a
    shared GPU out, test_upstream_shared_counters.py)."""
    yield from bring_up(request, SHARED_MIG_LAYOUT, "shared-mig", k8s=_minor(request, SHARED_COUNTERS_HELD_FIXED))


def test_arrivals_and_departures_on_shared_partitionable_gpus(shared_mig_bed, request) -> None:
    """Full GPUs and MIG devices that allow multiple allocations, MIG claims beside capacity claims: the model consumes a
    shared device's counters once, on its first share, and holds them while any share is, as the allocator does.

    No two claims ever share a device here, and the model says so too: with DynamicMIG, NVIDIA's driver publishes each
    device's engines and multiprocessors as capacities without a request policy, which a share consumes whole
    (docs/design/sharing.md). The machine proves the scheduler agrees, claim by claim; a driver that let them share
    would show here as co-located shares."""
    stats: dict[str, int] = {}
    run_state_machine_as_test(_machine(shared_mig_bed, request, stats, mig_percent=40, boards=("h100-80gb",)))
    print(f"shared partitionable machine: {stats}")
    assert stats.get("scheduled", 0) > 0 and stats.get("rejected", 0) > 0, f"nothing placed or nothing refused: {stats}"
    assert stats.get("co-located", 0) == 0, f"two claims shared a device of a dynamic-MIG GPU: {stats}"
