"""Consumable-shares parity: with `--consumable-shares memory|unlimited|<N>` our driver publishes exactly what
NVIDIA's gpu-kubelet-plugin (gate ConsumableShares) publishes on the same fake hardware.

Every board x every mode it has (whole; dynamic MIG and a static MIG layout on MIG boards) x the three kinds of
share value, on 1.34 (counters and devices in one slice) and 1.36 (consumable capacity beta, counters in slices
of their own). The comparison is test_slice_parity's (only parity.ALLOWED_DIFFERENCES may differ). Boards:
`nox -s tests` runs SMOKE_BOARDS (one of each code path: Hopper with every mode, Ampere's DynamicMIG rule, a board
without MIG); `nox -s sharing` ($DRA_TESTBED_SHARES_PARITY=full) test_slice_parity's DEFAULT_PARITY_BOARDS on both
minors; `DRA_TESTBED_PARITY_BOARDS=all` every board of the catalog.
"""

from __future__ import annotations

import os

import pytest
from kubernetes import client

from fake_gpus.catalog import CatalogError, get_board
from fake_gpus.driver.consumable_shares import BAD_STEP, NOT_MULTIPLE
from fake_gpus.driver.slices import server_minor
from fake_gpus.machine.provision import usable_layouts
from testbed.drivers.nvidia import parity, plugin

from suites.nvidia.test_slice_parity import BOARDS_ENV, board_cases, on_minor, parity_bed, parity_boards  # noqa: F401 (fixtures)

pytestmark = pytest.mark.cluster
# 1.34: alpha DRAConsumableCapacity, a GPU's counters beside its devices; 1.36: beta, counters apart
# more minors, by hand (1.35's and 1.37's shapes equal 1.34's and 1.36's): $DRA_TESTBED_PARITY_MINORS=1.35,1.37
MINORS_ENV = "DRA_TESTBED_PARITY_MINORS"
MINORS = ("1.34", *(pytest.param(m, marks=pytest.mark.second_minor)
                    for m in ["1.36", *(m for m in os.environ.get(MINORS_ENV, "").split(",") if m and m not in ("1.34", "1.36"))]))
# NVIDIA's three kinds of value: the whole memory by default, nothing by default, and N shares beside the memory
SHARES = ("memory", "unlimited", "4")

SMOKE_BOARDS = ("h100-80gb", "a100-80gb", "l4-24gb")
FULL_ENV = "DRA_TESTBED_SHARES_PARITY"


def _boards() -> tuple[str, ...]:
    if os.environ.get(BOARDS_ENV) or os.environ.get(FULL_ENV) == "full":
        return parity_boards(os.environ.get(BOARDS_ENV))
    return SMOKE_BOARDS


try:
    CASES = [(board, mode, shares) for board, mode in board_cases(_boards()) for shares in SHARES]
except CatalogError as exc:
    raise pytest.UsageError(f"${BOARDS_ENV}: {exc}") from None


def _slices(parity_bed, make, board: str, mode: str, shares: str, faults: frozenset[str] = frozenset(),
            served: bool = True) -> tuple[list[dict], list[dict]]:
    """(ours, NVIDIA's) for a fresh node of `board` in `mode` sharing as `shares` (ours as parity.our_slices
    builds them with `faults`, `served` or not)."""
    count = 2 if mode.startswith("static-mig") else 8
    layout = usable_layouts(get_board(board))[mode.split(":", 1)[1]] if mode.startswith("static-mig") else None
    shared = f"{mode}:shares={shares}"
    node = make(board, count, shared, layout)
    theirs = plugin.wait_published(parity_bed.api, node)
    uid = parity_bed.core.read_node(node.node).metadata.uid
    minor = server_minor(client.VersionApi(parity_bed.api).get_code())
    def ours(with_faults: frozenset[str]) -> list[dict]:
        return parity.our_slices(parity_bed.api, node.node, uid, node.views.state_dir, shared, minor, with_faults, served)
    return ours(faults), theirs


@pytest.mark.parametrize("parity_bed", MINORS, indirect=True, scope="module")
@pytest.mark.parametrize("board, mode, shares", CASES, ids=[f"{b}-{m}-{s}" for b, m, s in CASES])
def test_our_shares_equal_nvidias(board: str, mode: str, shares: str, parity_bed, on_minor) -> None:
    ours, theirs = _slices(parity_bed, on_minor, board, mode, shares)
    assert parity.differences(ours, theirs) == []


@pytest.mark.parametrize("parity_bed", MINORS, indirect=True, scope="module")
def test_the_comparison_sees_a_sharing_difference(parity_bed, on_minor) -> None:
    """The check can fail: a device not marked for multiple allocations, or a memory step that is not NVIDIA's,
    is caught. The API server refuses both faults' slices (a request policy needs allowMultipleAllocations and a
    step dividing its range), so our bodies are compared as built, which without a fault equal NVIDIA's."""
    ours, theirs = _slices(parity_bed, on_minor, "h100-80gb", "dynamic-mig", "4", served=False)
    assert parity.differences(ours, theirs) == []
    ours, theirs = _slices(parity_bed, on_minor, "h100-80gb", "dynamic-mig", "4", frozenset({NOT_MULTIPLE}), served=False)
    missing = parity.differences(ours, theirs)
    assert missing and all("allowMultipleAllocations: only NVIDIA's" in d for d in missing)
    ours, theirs = _slices(parity_bed, on_minor, "h100-80gb", "whole", "memory", frozenset({BAD_STEP}), served=False)
    steps = parity.differences(ours, theirs)
    assert any("requestPolicy.validRange.step: ours '3Mi', NVIDIA's '1Mi'" in d for d in steps), steps
    assert all(".requestPolicy." in d and "ours '3Mi', NVIDIA's '1Mi'" in d for d in steps), steps  # (memory: min is the step)
