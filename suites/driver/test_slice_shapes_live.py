"""Every board x mode published to the live API server of 1.34 and of 1.35: accepted, and shaped as each
version requires (counters with their devices on 1.34, in slices of their own on 1.35) and as NVIDIA's driver
shapes its pools."""

from __future__ import annotations

from typing import Iterator

import pytest

from conftest import driver_cluster
from fake_gpus.catalog import all_boards
from fake_gpus.driver.dynamic_offer import mig_toggles_without_reset
from fake_gpus.machine.provision import usable_layouts
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster


def shape_nodes() -> list[str]:
    """Per board: whole; per MIG board dynamic MIG (3 GPUs: more than one 1.34 slice holds) and every usable static
    layout (a board without MIG has neither: the layout refuses them)."""
    nodes = []
    for i, board in enumerate(all_boards()):
        nodes += [f"w{i}={board.key}:2:whole"]
        if board.mig_capable:
            nodes += [f"d{i}={board.key}:3:dynamic-mig"]
            nodes += [f"s{i}-{j}={board.key}:1:static-mig:{name}" for j, name in enumerate(usable_layouts(board))]
    return nodes + ["d-h100-8=h100-80gb:8:dynamic-mig"]


@pytest.fixture(scope="module", params=["1.34", pytest.param("1.35", marks=pytest.mark.second_minor)])
def shape_bed(request: pytest.FixtureRequest, bed) -> Iterator[TestBed]:
    # both minors on purpose: the slice shapes differ between the versions the API serves
    with driver_cluster(bed, f"shapes-{request.param}", shape_nodes(), minor=request.param) as testbed:
        yield testbed


def test_every_node_has_a_complete_pool(shape_bed: TestBed) -> None:
    # the bed came up, so the API server accepted every slice the publisher wrote
    slices = shape_bed.resource.list_resource_slice().items
    by_pool: dict[str, list] = {}
    for s in slices:
        by_pool.setdefault(s.spec.pool.name, []).append(s)
    assert set(by_pool) == {n.name for n in shape_bed.layout.nodes}
    for pool, members in by_pool.items():
        assert {(s.spec.pool.generation, s.spec.pool.resource_slice_count) for s in members} == {(1, len(members))}, pool
        assert all(s.spec.node_name == pool for s in members)


def test_counters_sit_where_the_served_version_wants_them(shape_bed: TestBed) -> None:
    from kubernetes import client

    minor = int(client.VersionApi(shape_bed.api).get_code().minor.rstrip("+"))
    boards = {b.key: b for b in all_boards()}
    # the GPUs that offer partitions with their counter sets: Hopper and newer (an Ampere GPU's MIG mode is off as
    # provisioned, so it is offered whole, as NVIDIA's driver offers it: fake_gpus/driver/dynamic_offer.py)
    partitioned = [n for n in shape_bed.layout.nodes if n.mode.kind == "dynamic-mig" and mig_toggles_without_reset(boards[n.board].nvml_architecture)]
    assert partitioned
    for node in partitioned:
        members = [s for s in shape_bed.resource.list_resource_slice().items if s.spec.pool.name == node.name]
        sets = [c.name for s in members for c in (s.spec.shared_counters or [])]
        assert sorted(sets) == sorted(f"gpu-{i}-counter-set" for i in range(node.count))
        if minor == 34:
            for s in members:  # each device's counter set is in its own slice
                local = {c.name for c in s.spec.shared_counters or []}
                assert all(e.counter_set in local for d in s.spec.devices for e in d.consumes_counters)
                assert sum(len(c.counters) for c in s.spec.shared_counters or []) <= 32
            assert len(members) == node.count  # as NVIDIA's driver: one slice per GPU
        else:
            assert all(not (s.spec.shared_counters and s.spec.devices) for s in members)
            assert all(len(s.spec.devices or []) <= 64 for s in members)
            assert any(s.spec.shared_counters for s in members) and any(s.spec.devices for s in members)
            # as NVIDIA's driver: the counter sets of all GPUs in one slice, then one slice of devices per GPU
            assert len(members) == node.count + 1


def test_blackwell_dynamic_pools_offer_every_profile_and_placement(shape_bed: TestBed) -> None:
    """Every Blackwell board (B200, GB200, B300, GB300) in dynamic MIG: every catalog profile x placement (3g/4g/7g
    included) published per GPU, accepted."""
    boards = {b.key: b for b in all_boards()}
    blackwell = {k for k, b in boards.items() if b.mig_capable and b.dra_architecture == "Blackwell"}
    assert {"b200-180gb", "gb200-186gb", "b300-288gb", "gb300-288gb"} <= blackwell
    for node in (n for n in shape_bed.layout.nodes if n.mode.kind == "dynamic-mig" and n.board in blackwell):
        devices = [d for s in shape_bed.resource.list_resource_slice().items if s.spec.pool.name == node.name
                   for d in s.spec.devices or []]
        profiles = {d.attributes["profile"].string for d in devices if "profile" in d.attributes}
        board = boards[node.board]
        assert profiles == {p.name for p in board.gpu_instance_profiles}, node.name
        assert len(devices) == node.count * (1 + sum(len(p.placements) for p in board.gpu_instance_profiles)), node.name
