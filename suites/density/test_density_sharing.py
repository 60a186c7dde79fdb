"""Sharing modes of `dra-testbed density`: a share as capacity, checked against the allocator's own rules
(testbed.workloads.capacity, the model of what the scheduler consumes), and the count of shared GPUs."""

from __future__ import annotations

from decimal import Decimal

import pytest
from kubernetes.utils.quantity import parse_quantity

from fake_gpus.catalog import get_board
from fake_gpus.driver.consumable_shares import apply_consumable_shares
from fake_gpus.driver.identity import current_identity
from fake_gpus.node import parse_mode
from testbed.cli.density import check_sharing_minor, parse_modes
from testbed.clusters.layout import LayoutError, load_layout
from testbed.density.metrics import sample
from testbed.density.placement import PACKING_CONFIG, cpu_per_gpu, cpu_request, scheduler_config
from testbed.density.sharing import memory_sizes, shared_claim_body
from testbed.density.trace import TracePod
from testbed.workloads.capacity import CapacityPolicy, consumption

H100 = get_board("h100-80gb")
MILLI = (1, 50, 100, 250, 333, 460, 500, 650, 810, 999, 1000)  # the trace's common shares and the edges


def _published(shares: str) -> tuple[dict[str, Decimal], dict[str, CapacityPolicy]]:
    """An H100's whole-GPU device as our driver publishes it under `shares`: capacities and policies."""
    device = apply_consumable_shares({"name": "gpu-0", "capacity": {"memory": {"value": f"{H100.memory_mib}Mi"}}}, shares)
    capacity = {name: Decimal(parse_quantity(c["value"])) for name, c in device["capacity"].items()}
    policies = {name: CapacityPolicy.parse(c.get("requestPolicy")) for name, c in device["capacity"].items()}
    return capacity, policies


def _consumed(milli: int, shares: str, num_gpu: int = 1) -> dict[str, Decimal]:
    pod = TracePod(0, "p", num_gpu, milli)
    claim = shared_claim_body(pod, "c", parse_mode(f"whole:shares={shares}"), memory_sizes(["h100-80gb"]), current_identity())
    [sub] = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert sub["count"] == num_gpu and sub["deviceClassName"] == current_identity().gpu_class
    asked = {name: Decimal(parse_quantity(v)) for name, v in (sub.get("capacity") or {}).get("requests", {}).items()}
    capacity, policies = _published(shares)
    used = consumption(asked, capacity, policies)
    assert used is not None, f"the device refuses {asked}"
    return used


@pytest.mark.parametrize("milli", MILLI)
def test_memory_share_consumes_its_fraction_of_the_gpu_rounded_up_to_a_mebibyte(milli: int) -> None:
    used = _consumed(milli, "memory")["memory"] / 2**20
    share = Decimal(milli * H100.memory_mib) / 1000
    assert share <= used < share + 1  # never less than the share, at most the MiB the policy's step rounds to


@pytest.mark.parametrize(("shares", "milli", "expected"), [
    ("10", 1, 1), ("10", 100, 1), ("10", 101, 2), ("10", 650, 7), ("10", 999, 10), ("10", 1000, 10),
    ("100", 460, 46), ("100", 461, 47), ("100", 1000, 100), ("1", 5, 1)])
def test_counted_share_takes_the_shares_rounded_up_and_no_memory(shares: str, milli: int, expected: int) -> None:
    used = _consumed(milli, shares)
    assert used["shares"] == expected and used["memory"] == 0


@pytest.mark.parametrize("shares", ["memory", "10"])
def test_whole_and_multi_gpu_pods_leave_nothing_to_share(shares: str) -> None:
    capacity, _ = _published(shares)
    for num_gpu in (1, 8):
        used = _consumed(1000, shares, num_gpu)
        key = "memory" if shares == "memory" else "shares"
        assert used[key] == capacity[key]


def test_a_fleet_of_two_memory_sizes_asks_in_each_boards_terms() -> None:
    sizes = memory_sizes(["h200-141gb", "h100-80gb", "h100-80gb"])
    claim = shared_claim_body(TracePod(0, "p", 1, 500), "c", parse_mode("whole:shares=memory"), sizes, current_identity())
    subs = claim["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [s["capacity"]["requests"]["memory"] for s in subs] == [f"{-(-500 * m // 1000)}Mi" for m in sizes]
    assert all(f"quantity('{m}Mi')" in s["selectors"][0]["cel"]["expression"] for s, m in zip(subs, sizes))


def test_a_shared_gpu_counts_once_and_its_free_part_as_stranded() -> None:
    """Three pods on one GPU of node a, one on node b: two GPUs in use, not four, not one."""
    alive = {0: (0.25, [("a", "gpu-0")]), 1: (0.5, [("a", "gpu-0")]), 2: (0.125, [("a", "gpu-0")]),
             3: (0.5, [("b", "gpu-0")]), 4: (0.3, [])}
    got = sample(0, 0, alive, {"a": 80.0, "b": 80.0})
    assert (got.gpus_in_use, got.placed, got.pending) == (2, 4, 1)
    assert got.stranded_compute == pytest.approx(0.125 + 0.5)
    assert got.stranded_memory_gib == pytest.approx(80 * 0.125 + 80 * 0.5)


def test_sharing_modes_are_checked_against_the_minor_and_the_kind() -> None:
    fleet = load_layout("clusters/layouts/density-h100.yaml")
    modes = parse_modes("whole,whole:shares=memory,whole:shares=100", fleet)
    assert check_sharing_minor(modes, "1.35") is None and check_sharing_minor(modes[:1], "1.34") is None
    assert "needs --k8s 1.35 or newer" in check_sharing_minor(modes, "1.34")
    for text in ("dynamic-mig:shares=memory", "whole:shares=unlimited"):
        with pytest.raises(LayoutError, match="valid sharing modes: whole:shares=memory, whole:shares=<N>"):
            parse_modes(text, fleet)


def test_packing_profile_scores_most_allocated_cpu_that_never_refuses_a_fitting_pod(tmp_path) -> None:
    assert scheduler_config("default", tmp_path) is None
    path = scheduler_config("packing", tmp_path)
    assert path is not None and "MostAllocated" in path.read_text()
    assert PACKING_CONFIG["profiles"][0]["schedulerName"] == "default-scheduler"
    per_gpu = cpu_per_gpu(8)
    # eight GPUs' worth of the largest shares below a GPU still fit the node's 128 CPUs
    total = sum(int(cpu_request(TracePod(0, "p", 1, 999), per_gpu).removesuffix("m")) for _ in range(8))
    assert total <= 128_000
    assert cpu_request(TracePod(0, "p", 8, 1000), per_gpu) == "128000m"
