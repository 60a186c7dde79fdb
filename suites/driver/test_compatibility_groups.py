"""Compatibility groups on dynamic MIG (Kubernetes 1.37 alpha): opt-in, and off by default so that our
slices stay NVIDIA's (whose driver publishes none). The scheduler honouring them is
test_gang_scheduling_live.py::test_compatibility_groups_keep_whole_and_mig_apart_without_counters."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
from fake_gpus.driver.slices import (COMPATIBILITY_GROUPS_ENV, LIST_ATTRIBUTES_ENV, MIG_GROUP, WHOLE_GPU_GROUP, api_limits,
                                     build_slices, compatibility_groups_on)
from fake_gpus.node import parse_mode
from fake_gpus.nvml import state
from fake_gpus.nvml.build import SONAME, ensure_library

IDENTITY = DriverIdentity()


@pytest.fixture(scope="module")
def h100(tmp_path_factory: pytest.TempPathFactory):
    path: Path = tmp_path_factory.mktemp("cg") / "node"
    state.create_state_dir(path, [("h100-80gb", 2)])
    return inventory(NvmlLibrary(ensure_library() / SONAME), path)


def _consumptions(bodies: list[dict]) -> dict[str, dict]:
    """Device name -> its one consumesCounters entry (dynamic MIG devices have exactly one)."""
    return {d["name"]: d["consumesCounters"][0] for b in bodies for d in b["spec"].get("devices", []) if "consumesCounters" in d}


def test_no_groups_by_default(h100, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(COMPATIBILITY_GROUPS_ENV, raising=False)
    bodies = build_slices("n", h100, parse_mode("dynamic-mig"), api_limits("1.37"), IDENTITY)
    assert "compatibilityGroups" not in repr(bodies)


@pytest.mark.parametrize("faults", [frozenset(), frozenset({"counters-undeclared"})], ids=["counters", "counters-undeclared"])
def test_full_gpu_and_mig_devices_share_no_group(h100, faults: frozenset[str]) -> None:
    entries = _consumptions(build_slices("n", h100, parse_mode("dynamic-mig"), api_limits("1.37"), IDENTITY, faults, groups=True))
    full = {name: e for name, e in entries.items() if "-mig-" not in name}
    mig = {name: e for name, e in entries.items() if "-mig-" in name}
    assert sorted(full) == ["gpu-0", "gpu-1"] and len(mig) > 2
    assert all(e["compatibilityGroups"] == [WHOLE_GPU_GROUP] for e in full.values())
    assert all(e["compatibilityGroups"] == [MIG_GROUP] for e in mig.values())
    if faults:  # the fault takes the full GPU's counters; its entry stays only to carry the group, taking nothing
        assert all(v["value"] == "0" for e in full.values() for v in e["counters"].values())


def test_groups_only_where_devices_share_a_counter_set(h100) -> None:
    for mode in ("whole", "static-mig:all-1g.10gb"):
        bodies = build_slices("n", h100, parse_mode(mode), api_limits("1.37"), IDENTITY, groups=True)
        assert "compatibilityGroups" not in repr(bodies), mode


def test_switch_reads_the_environment() -> None:
    assert compatibility_groups_on({COMPATIBILITY_GROUPS_ENV: "1"})
    assert not compatibility_groups_on({COMPATIBILITY_GROUPS_ENV: "0"})
    assert not compatibility_groups_on({})


def test_numa_node_as_a_list_only_when_switched_on(h100, monkeypatch: pytest.MonkeyPatch) -> None:
    """NVIDIA's driver under its DRAListTypeAttributes gate publishes resource.kubernetes.io/numaNode as a
    one-element list (cmd/gpu-kubelet-plugin/deviceinfo.go); ours the same under its switch, else the scalar."""
    placed = replace(h100, gpus=tuple(replace(g, numa_node=i) for i, g in enumerate(h100.gpus)))  # as sysfs says
    numa = {0, 1}

    def published() -> list[dict]:
        bodies = build_slices("n", placed, parse_mode("whole"), api_limits("1.37"), IDENTITY)
        return [d["attributes"]["resource.kubernetes.io/numaNode"] for b in bodies for d in b["spec"]["devices"]]

    monkeypatch.delenv(LIST_ATTRIBUTES_ENV, raising=False)
    assert {v["int"] for v in published()} == numa
    monkeypatch.setenv(LIST_ATTRIBUTES_ENV, "1")
    assert all(set(v) == {"ints"} and len(v["ints"]) == 1 for v in published())
    assert {v["ints"][0] for v in published()} == numa
