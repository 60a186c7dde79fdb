"""Dynamic MIG where NVIDIA's plugin decides per GPU: Ampere with MIG mode on or off, and nodes whose GPUs
include a board without MIG (NVIDIA's issue #1092).

NVIDIA's gpu-kubelet-plugin (cmd/gpu-kubelet-plugin/nvlib.go: GetPerGpuAllocatableDevices,
isDynamicMIGCapable, supportsMIGModeToggle; driver.go: NewDriver) offers a GPU's MIG partitions only where
MIG mode can change without a GPU reset (Hopper and newer) or is already on (Ampere); a GPU without MIG is
offered whole. Our driver follows it (fake_gpus.driver.dynamic_offer). Layouts give a node one board and
leave MIG mode off in dynamic-MIG mode, so these nodes are made here from fake-NVML state directories,
which may hold several boards and have MIG mode turned on through NVML before the plugin starts, as an
admin's MIG manager would.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Callable, Iterator

import pytest
from kubernetes import client

from fake_gpus.driver.nvml_adapter import Nvml, NvmlLibrary, inventory
from fake_gpus.driver.slices import api_limits, build_slices, server_minor
from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.machine.views import MachineViews, ensure_machine
from fake_gpus.node import parse_mode as parse_hardware_mode
from fake_gpus.nvml import state
from fake_gpus.nvml.build import SONAME, ensure_library
from testbed.clusters.layout import NodeSpec, parse_mode
from testbed.drivers.nvidia import nodes, parity, plugin

from suites.nvidia.test_slice_parity import parity_bed  # noqa: F401  (a fixture: the beds of the two pool shapes)

DYNAMIC_MIG = ("DynamicMIG=true",)
Boards = list[tuple[str, int]]


def make_state(state_dir: Path, boards: Boards, mig_on: tuple[int, ...] = ()) -> MachineViews:
    """A node's fake hardware with these (board, count) GPUs, MIG mode on for the GPUs indexed in `mig_on`."""
    state.create_state_dir(state_dir, boards)
    views = ensure_machine(state_dir)
    with NvmlLibrary(ensure_library() / SONAME).session(state_dir):
        nvml = Nvml()
        for index in mig_on:
            nvml.enable_mig(nvml.gpu_by_minor(nvml.minors()[index]))
    return views


@pytest.fixture
def dynamic_node(parity_bed, nvidia_binary: Path, tmp_path: Path) -> Iterator[Callable[..., plugin.NodePlugin]]:
    """dynamic_node(boards, mig_on=()) -> a fresh KWOK node on that hardware served by NVIDIA's plugin with
    DynamicMIG; removed after the test, with its plugin and files."""
    started: list[plugin.NodePlugin] = []

    def make(boards: Boards, mig_on: tuple[int, ...] = ()) -> plugin.NodePlugin:
        name = f"nv-{uuid.uuid4().hex[:6]}"
        spec = NodeSpec(name, boards[0][0], sum(count for _, count in boards), parse_mode("whole", name))
        client.CoreV1Api(parity_bed.api).create_node(body=nodes.nvidia_node_object(spec))
        node = plugin.node_plugin(tmp_path, name, make_state(plugin.state_dir(tmp_path, name), boards, mig_on))
        node.home.mkdir(parents=True, exist_ok=True)
        started.append(node)
        # the gate alone, mode "whole": the layout's mode checks do not apply to hardware made here
        plugin.start(nvidia_binary, node, parity_bed.kubeconfig, "whole", gates=DYNAMIC_MIG)
        return node

    yield make
    for node in started:
        nodes.remove_node(parity_bed.api, node)


def published(testbed, node: plugin.NodePlugin) -> tuple[list[dict], list[dict], str]:
    """NVIDIA's slices for `node`, ours for the same hardware (checked by the API server) and the minor."""
    theirs = plugin.wait_published(testbed.api, node)
    uid = testbed.core.read_node(node.node).metadata.uid
    minor = server_minor(client.VersionApi(testbed.api).get_code())
    return parity.our_slices(testbed.api, node.node, uid, node.views.state_dir, "dynamic-mig", minor), theirs, minor


def devices_by_slice(slices: list[dict]) -> list[list[str]]:
    return sorted(sorted(d["name"] for d in s["spec"].get("devices") or []) for s in slices)


def counter_sets(slices: list[dict]) -> list[str]:
    return sorted(c["name"] for s in slices for c in s["spec"].get("sharedCounters") or [])


def placements(slices: list[dict], prefix: str) -> list[str]:
    return [d["name"] for s in slices for d in s["spec"].get("devices") or [] if d["name"].startswith(prefix)]


# --------------------------------------------------------------------------- without a cluster


@pytest.mark.parametrize("boards, mig_on", [([("a100-80gb", 2)], ()), ([("a100-80gb", 2)], (0,)),
                                            ([("h100-80gb", 1), ("l4-24gb", 1)], ())])
def test_health_names_are_the_published_devices(boards: Boards, mig_on: tuple[int, ...], tmp_path: Path) -> None:
    """The kubelet plugin's device list (health) and the slices apply one offer per GPU."""
    make_state(tmp_path, boards, mig_on)
    library = NvmlLibrary(ensure_library() / SONAME)
    bodies = build_slices("n", inventory(library, tmp_path), parse_hardware_mode("dynamic-mig"), api_limits("1.34"), DriverIdentity())
    with library.session(tmp_path):
        nvml = Nvml()
        names = [name for minor in nvml.minors() for name in nvml.device_names(minor, dynamic=True)]
    assert sorted(names) == sorted(d["name"] for b in bodies for d in b["spec"]["devices"])
    assert ("gpu-0" in names) == (0 not in mig_on)


# --------------------------------------------------------------------------- NVIDIA's plugin


@pytest.mark.cluster
def test_ampere_offers_partitions_only_with_mig_mode_on(parity_bed, dynamic_node) -> None:
    """A100 with DynamicMIG: MIG mode on (GPU 0) offers every profile x placement and no full GPU, since
    turning MIG off needs a reset NVIDIA's plugin never does; MIG mode off (GPU 1) offers the whole GPU
    alone, consuming no counters. Our driver publishes the same."""
    node = dynamic_node([("a100-80gb", 2)], mig_on=(0,))
    ours, theirs, minor = published(parity_bed, node)
    gpu0 = placements(theirs, "gpu-0")
    assert "gpu-0" not in gpu0 and len(gpu0) == 25  # 1g.10gb x7, +me x7, 1g.20gb x4, 2g x3, 3g x2, 4g, 7g
    assert ["gpu-1"] in devices_by_slice(theirs) and counter_sets(theirs) == ["gpu-0-counter-set"]
    assert "MIG mode is disabled and cannot be toggled without GPU reset" in node.log.read_text()
    assert parity.differences(ours, theirs) == []


@pytest.mark.cluster
def test_dynamic_mig_on_a_node_mixing_mig_and_non_mig_boards(parity_bed, dynamic_node) -> None:
    """Records NVIDIA's issue #1092 ("DynamicMIG: detect supported gpus and only activate for those",
    reported on L4; fixed by PR #1113 before the pinned commit): on a node of an H100 and an L4 with
    DynamicMIG on, the plugin skips DynamicMIG for the L4 alone ("hardware does not support MIG") and
    publishes it whole, with its memory only and no counters, in a slice of its own, beside the H100's full
    GPU, placements and counter set. Our driver publishes the same. Our layouts cannot express such a node
    (one board per node); the fake-NVML state directory can."""
    node = dynamic_node([("h100-80gb", 1), ("l4-24gb", 1)])
    ours, theirs, minor = published(parity_bed, node)
    log = node.log.read_text()
    assert "hardware does not support MIG - skipping DynamicMIG" in log and "no MIG capable GPU" not in log
    assert ["gpu-1"] in devices_by_slice(theirs) and counter_sets(theirs) == ["gpu-0-counter-set"]
    assert len(placements(theirs, "gpu-0")) == 26  # the full H100 and its 25 profile x placements
    (l4,) = [d for s in theirs for d in s["spec"].get("devices") or [] if d["name"] == "gpu-1"]
    assert set(l4["capacity"]) == {"memory"} and "consumesCounters" not in l4
    assert len(theirs) == (2 if minor == "1.34" else 3)  # 1.35+: the counter sets' slice first
    assert parity.differences(ours, theirs) == []


@pytest.mark.cluster
def test_dynamic_mig_on_a_node_without_mig(parity_bed, dynamic_node) -> None:
    """#1092 as reported (L4 only): the plugin falls back to whole GPUs ("no MIG capable GPU found on this
    node") and, as DynamicMIG still chooses the pool's shape, publishes one slice per GPU on every minor,
    without the 1.35+ counter sets' slice. Our driver publishes the same."""
    node = dynamic_node([("l4-24gb", 2)])
    ours, theirs, _minor = published(parity_bed, node)
    assert "falling back to legacy Full GPU support" in node.log.read_text()
    assert devices_by_slice(theirs) == [["gpu-0"], ["gpu-1"]] and counter_sets(theirs) == []
    assert parity.differences(ours, theirs) == []
