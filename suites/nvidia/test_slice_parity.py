"""Slice parity: our driver publishes exactly what NVIDIA's gpu-kubelet-plugin publishes on the same fake hardware.

For every board, whole GPUs and, on MIG boards, dynamic MIG and a static MIG layout: NVIDIA's plugin runs
on a KWOK node's fake hardware (fake NVML, driver root, /proc and /sys views) and publishes; our driver's
slices for that same node are built from the same NVML state and checked by the API server (dryRun). The
comparison (testbed.drivers.nvidia.parity) leaves out only ALLOWED_DIFFERENCES; everything else must be identical. Both
minors whose pool shapes differ run: 1.34 (a GPU's counter set and devices in one slice) and 1.35 (the
counter sets, then a devices slice per GPU), each on a bed of its own.

The default run covers a representative set of boards (DEFAULT_PARITY_BOARDS: one or more per
architecture, MIG and not); `DRA_TESTBED_PARITY_BOARDS=all` (`nox -s parity-boards`) runs every board of the
catalog. Dynamic MIG on Ampere with MIG mode on, and nodes mixing MIG and non-MIG boards: test_dynamic_mig_nodes.py.
"""

from __future__ import annotations

import os
from typing import Iterator

import pytest
from kubernetes import client

from fake_gpus.catalog import BOARD_KEYS, CatalogError, get_board
from fake_gpus.driver.slices import server_minor
from fake_gpus.machine.provision import usable_layouts
from testbed.clusters.layout import Layout, parse_node_flag
from testbed.drivers.nvidia import parity, plugin

from suites.nvidia.conftest import node_factory

pytestmark = pytest.mark.cluster
MINORS = ("1.34", pytest.param("1.35", marks=pytest.mark.second_minor))  # the two pool shapes NVIDIA's driver publishes (1.36+ shares 1.35's)


@pytest.fixture(scope="module", params=MINORS)
def parity_bed(request: pytest.FixtureRequest, bed, testbed):
    """The session's bed when it runs this minor, else a one-node KWOK bed of it (NVIDIA's nodes join it)."""
    if request.param == request.config.option.k8s.removeprefix("v"):
        yield testbed
        return
    layout = Layout((parse_node_flag("anchor=h100-80gb:1:whole"),), name=f"nvparity-{request.param}")
    with bed(layout, backend="kwok", k8s=request.param) as minor_bed:
        yield minor_bed


@pytest.fixture
def on_minor(parity_bed, nvidia_binary) -> Iterator:
    with node_factory(parity_bed, nvidia_binary) as make:
        yield make


# The default run's boards: every Hopper and Blackwell board, and one of Ampere (MIG) and Ada (no MIG). The
# boards left out share a code path with one kept (a100-40gb and a30-24gb: a100-80gb's; l40s-48gb and
# t4-16gb: l4-24gb's); together they cost ~13 s per minor (1.34, measured).
DEFAULT_PARITY_BOARDS = ("h100-80gb", "h100-nvl-94gb", "h200-141gb", "b200-180gb", "gb200-186gb", "a100-80gb", "l4-24gb")
BOARDS_ENV = "DRA_TESTBED_PARITY_BOARDS"


def parity_boards(value: str | None) -> tuple[str, ...]:
    """The boards of a run: DEFAULT_PARITY_BOARDS, `all` (the catalog) or a comma-separated list of keys."""
    if not value:
        return DEFAULT_PARITY_BOARDS
    if value == "all":
        return BOARD_KEYS
    keys = tuple(k.strip() for k in value.split(",") if k.strip())
    for key in keys:
        get_board(key)  # one line naming the unknown board and the valid ones
    return keys


def board_cases(keys: tuple[str, ...]) -> list[tuple[str, str]]:
    """Every mode the board has: whole; dynamic MIG and its first usable named layout where it has MIG."""
    cases = []
    for key in keys:
        board = get_board(key)
        cases.append((key, "whole"))
        if board.mig_capable:
            cases.append((key, "dynamic-mig"))
        layouts = usable_layouts(board)
        if layouts:
            cases.append((key, f"static-mig:{next(iter(layouts))}"))
    return cases


try:
    CASES = board_cases(parity_boards(os.environ.get(BOARDS_ENV)))
except CatalogError as exc:
    raise pytest.UsageError(f"${BOARDS_ENV}: {exc}") from None


@pytest.mark.parametrize("board, mode", CASES, ids=[f"{b}-{m}" for b, m in CASES])
def test_our_slices_equal_nvidias(board: str, mode: str, parity_bed, on_minor) -> None:
    testbed, nvidia_node = parity_bed, on_minor
    count = 2 if mode.startswith("static-mig") else 8
    layout = usable_layouts(get_board(board))[mode.split(":", 1)[1]] if mode.startswith("static-mig") else None
    node = nvidia_node(board, count, mode, layout)
    theirs = plugin.wait_published(testbed.api, node)
    uid = testbed.core.read_node(node.node).metadata.uid
    minor = server_minor(client.VersionApi(testbed.api).get_code())
    ours = parity.our_slices(testbed.api, node.node, uid, node.views.state_dir, mode, minor)
    assert parity.differences(ours, theirs) == []


def test_the_comparison_sees_a_difference(parity_bed, on_minor) -> None:
    """The check can fail: a driver that, say, drops one MIG placement or renames a device is caught."""
    testbed, nvidia_node = parity_bed, on_minor
    node = nvidia_node("h100-80gb", 1, "dynamic-mig")
    theirs = plugin.wait_published(testbed.api, node)
    uid = testbed.core.read_node(node.node).metadata.uid
    minor = server_minor(client.VersionApi(testbed.api).get_code())
    ours = parity.our_slices(testbed.api, node.node, uid, node.views.state_dir, "dynamic-mig", minor)
    def devices(change):  # `change` applied to the device list of every slice that has one (1.35: not the counter slices)
        return [dict(s, spec=dict(s["spec"], devices=change(s["spec"]["devices"]))) if "devices" in s["spec"] else s for s in ours]

    assert any("names differ" in d for d in parity.differences(devices(lambda ds: ds[:-1]), theirs))
    assert parity.differences(devices(lambda ds: [dict(d, name=d["name"] + "x") for d in ds]), theirs)
    wrong = devices(lambda ds: [dict(d, capacity={"memory": {"value": "1Gi"}}) for d in ds])
    assert any("capacity" in d for d in parity.differences(wrong, theirs))
