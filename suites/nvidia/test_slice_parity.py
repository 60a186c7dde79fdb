"""Slice parity: our driver publishes exactly what NVIDIA's gpu-kubelet-plugin publishes on the same fake hardware.

For every board, whole GPUs, dynamic MIG and a static MIG layout: NVIDIA's plugin runs on a KWOK node's
fake hardware (fake NVML, driver root, /proc and /sys views) and publishes; our driver's slices for that
same node are built from the same NVML state and checked by the API server (dryRun). The comparison
(testbed.nvidia.parity) leaves out only ALLOWED_DIFFERENCES; everything else must be identical.
"""

from __future__ import annotations

import pytest
from kubernetes import client

from fake_gpus.catalog import BOARD_KEYS, get_board
from fake_gpus.driver.slices import server_minor
from fake_gpus.machine.provision import usable_layouts
from testbed.nvidia import parity, plugin

pytestmark = pytest.mark.cluster


def _static_cases() -> list[tuple[str, str]]:
    cases = []
    for key in BOARD_KEYS:
        layouts = usable_layouts(get_board(key))
        if layouts:
            cases.append((key, f"static-mig:{next(iter(layouts))}"))
    return cases


CASES = [(key, mode) for key in BOARD_KEYS for mode in ("whole", "dynamic-mig")] + _static_cases()


@pytest.mark.parametrize("board, mode", CASES, ids=[f"{b}-{m}" for b, m in CASES])
def test_our_slices_equal_nvidias(board: str, mode: str, testbed, nvidia_node) -> None:
    count = 2 if mode.startswith("static-mig") else 8
    layout = usable_layouts(get_board(board))[mode.split(":", 1)[1]] if mode.startswith("static-mig") else None
    node = nvidia_node(board, count, mode, layout)
    theirs = plugin.wait_published(testbed.api, node)
    uid = testbed.core.read_node(node.node).metadata.uid
    minor = server_minor(client.VersionApi(testbed.api).get_code())
    ours = parity.our_slices(testbed.api, node.node, uid, node.views.state_dir, mode, minor)
    assert parity.differences(ours, theirs) == []


def test_the_comparison_sees_a_difference(testbed, nvidia_node) -> None:
    """The check can fail: a driver that, say, drops one MIG placement or renames a device is caught."""
    node = nvidia_node("h100-80gb", 1, "dynamic-mig")
    theirs = plugin.wait_published(testbed.api, node)
    uid = testbed.core.read_node(node.node).metadata.uid
    minor = server_minor(client.VersionApi(testbed.api).get_code())
    ours = parity.our_slices(testbed.api, node.node, uid, node.views.state_dir, "dynamic-mig", minor)
    dropped = [dict(s, spec=dict(s["spec"], devices=s["spec"]["devices"][:-1])) for s in ours]
    assert any("names differ" in d for d in parity.differences(dropped, theirs))
    renamed = [dict(s, spec=dict(s["spec"], devices=[dict(d, name=d["name"] + "x") for d in s["spec"]["devices"]])) for s in ours]
    assert parity.differences(renamed, theirs)
    wrong = [dict(s, spec=dict(s["spec"], devices=[dict(d, capacity={"memory": {"value": "1Gi"}}) for d in s["spec"]["devices"]])) for s in ours]
    assert any("capacity" in d for d in parity.differences(wrong, theirs))
