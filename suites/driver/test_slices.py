"""Inventory through NVML and slice building, without a cluster: the catalog is the expected truth."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fake_gpus.catalog import all_boards, get_board
from fake_gpus.driver import miglayout
from fake_gpus.driver.faults import UNDERDECLARED
from fake_gpus.driver.dynamic_offer import mig_toggles_without_reset
from fake_gpus.driver.identity import CAPACITY_COUNTERS, DriverIdentity, counter_set_name, memory_slice_counter, mig_device_name, parse_device_name
from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
from fake_gpus.driver.slices import ApiLimits, LIMITS_1_34, LIMITS_1_35, api_limits, build_slices, mebibytes
from fake_gpus.machine.provision import usable_layouts
from fake_gpus.node import ModeError, parse_mode
from fake_gpus.nvml import state
from fake_gpus.nvml.build import SONAME, ensure_library

REPO = Path(__file__).resolve().parents[2]
IDENTITY = DriverIdentity()
BOARDS = [b.key for b in all_boards()]
MIG_BOARDS = [b.key for b in all_boards() if b.mig_capable]  # T4, L4, L40S have no MIG: whole GPUs only
# dynamic MIG offers the full GPU and every placement only where MIG mode toggles without a reset (Hopper+);
# Ampere's offer is checked in suites/nvidia/test_dynamic_mig_nodes.py
RESETLESS_MIG_BOARDS = [b.key for b in all_boards() if b.mig_capable and mig_toggles_without_reset(b.nvml_architecture)]
MINORS = ("1.34", "1.35", "1.36")


@pytest.fixture(scope="module")
def nvml() -> NvmlLibrary:
    return NvmlLibrary(ensure_library() / SONAME)


@pytest.fixture
def node(tmp_path: Path, nvml: NvmlLibrary):
    """node(board, count) -> state dir of a fresh simulated node."""
    def make(board: str, count: int) -> Path:
        path = tmp_path / f"{board}-{count}-{len(list(tmp_path.iterdir()))}"
        state.create_state_dir(path, [(board, count)])
        return path
    return make


def test_driver_never_imports_the_catalog() -> None:
    code = ("import sys, fake_gpus.driver.nvml_adapter, fake_gpus.driver.slices, fake_gpus.driver.miglayout, "
            "fake_gpus.driver.publisher; print(sorted(m for m in sys.modules if m.startswith('fake_gpus.catalog')))")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_inventory_matches_the_catalog(key: str, node, nvml: NvmlLibrary) -> None:
    board = get_board(key)
    inv = inventory(nvml, node(key, 2))
    assert inv.driver_version == board.driver_version
    assert [g.minor for g in inv.gpus] == [0, 1]
    gpu = inv.gpus[0]
    assert (gpu.product_name, gpu.memory_mib, gpu.architecture, gpu.brand) == (
        board.product_name, board.memory_mib, board.dra_architecture, board.dra_brand)
    assert gpu.cuda_compute_capability == tuple(board.cuda_compute_capability)
    assert gpu.mig_capable and not gpu.mig_enabled and gpu.mig_devices == ()
    # profiles with unknown facts answer NOT_SUPPORTED and are skipped; the rest carry the catalog's counts
    assert {p.name for p in gpu.profiles} == {p.name for p in board.gpu_instance_profiles if p.complete}
    for p in gpu.profiles:
        want = board.profile(p.name)
        assert (p.id, p.memory_mib, p.multiprocessors, p.copy_engines, p.decoders, p.jpeg_engines, p.ofa_engines) == (
            want.id, want.memory_mib, want.multiprocessors, want.copy_engines, want.decoders, want.jpeg_engines, want.ofa_engines)
        assert [(x.start, x.size) for x in p.placements] == [(s, want.memory_slices) for s in want.placements]


def check_limits(bodies: list[dict], limits: ApiLimits) -> None:
    """The API's size rules, restated from the numbers (independent of the builder's packing)."""
    pool_sets = {c["name"] for b in bodies for c in b["spec"].get("sharedCounters", [])}
    for body in bodies:
        spec = body["spec"]
        devices, sets = spec.get("devices", []), spec.get("sharedCounters", [])
        consuming = any(d.get("consumesCounters") for d in devices)
        if limits.separate_counter_slices:
            assert not (devices and sets), "1.35+: devices and sharedCounters never share a slice"
            assert len(sets) <= 8
            assert len(devices) <= (64 if consuming else 128)
        else:
            assert len(devices) <= 128
            assert sum(len(c["counters"]) for c in sets) <= 32
            assert sum(len(e["counters"]) for d in devices for e in d.get("consumesCounters", [])) <= 1024
        for c in sets:
            assert len(c["counters"]) <= 32
        local = {c["name"] for c in sets}
        for d in devices:
            assert len(d["attributes"]) + len(d["capacity"]) <= 32
            entries = d.get("consumesCounters", [])
            if limits.separate_counter_slices:
                assert len(entries) <= 2 and all(len(e["counters"]) <= 32 for e in entries)
                assert all(e["counterSet"] in pool_sets for e in entries)
            else:
                assert sum(len(e["counters"]) for e in entries) <= 32
                assert all(e["counterSet"] in local for e in entries), "1.34: the counter set must be in the device's slice"
    pools = {(b["spec"]["pool"]["generation"], b["spec"]["pool"]["resourceSliceCount"]) for b in bodies}
    assert pools == {(1, len(bodies))}
    assert len({b["metadata"]["name"] for b in bodies}) == len(bodies)


def devices_of(bodies: list[dict]) -> dict[str, dict]:
    return {d["name"]: d for b in bodies for d in b["spec"].get("devices", [])}


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("key", RESETLESS_MIG_BOARDS)
def test_dynamic_mig_slices(key: str, minor: str, node, nvml: NvmlLibrary) -> None:
    board = get_board(key)
    inv = inventory(nvml, node(key, 8))
    bodies = build_slices("n", inv, parse_mode("dynamic-mig"), api_limits(minor), IDENTITY)
    check_limits(bodies, api_limits(minor))
    devices = devices_of(bodies)
    complete = [p for p in board.gpu_instance_profiles if p.complete]
    assert len(devices) == 8 * (1 + sum(len(p.placements) for p in complete))
    sets = {c["name"]: c["counters"] for b in bodies for c in b["spec"].get("sharedCounters", [])}
    assert set(sets) == {counter_set_name(i) for i in range(8)}
    for name, device in devices.items():
        ref = parse_device_name(name)
        (entry,) = device["consumesCounters"]
        assert entry["counterSet"] == counter_set_name(ref.minor)
        slices = {c for c in entry["counters"] if c.startswith("memory-slice-")}
        if not ref.is_mig:
            assert entry["counters"] == sets[entry["counterSet"]], "the full GPU consumes every counter"
            continue
        profile = board.profile(device["attributes"]["profile"]["string"])
        assert ref.profile_id == profile.id
        assert slices == {memory_slice_counter(i) for i in range(ref.start, ref.start + profile.memory_slices)}
        assert entry["counters"]["multiprocessors"]["value"] == str(profile.multiprocessors)
        assert device["attributes"]["parentUUID"]["string"] == inv.gpus[ref.minor].uuid
    # NVIDIA's pool shape: 1.34 one slice per GPU (its counter set and devices), 1.35+ the counter sets
    # first, then one slice of devices per GPU; within a GPU the devices sorted by name
    with_sets = [b for b in bodies if b["spec"].get("sharedCounters")]
    assert len(bodies) == (8 if minor == "1.34" else 9) and len(with_sets) == (8 if minor == "1.34" else 1)
    for body in bodies:
        names = [d["name"] for d in body["spec"].get("devices", [])]
        assert names == sorted(names) and len({parse_device_name(n).minor for n in names}) <= 1
    full = devices["gpu-0"]
    assert {k: v["value"] for k, v in full["capacity"].items()} == {
        k: sets[counter_set_name(0)][CAPACITY_COUNTERS[k]]["value"] for k in CAPACITY_COUNTERS}
    if board.key == "h100-80gb":  # the full-GPU profile is known: the totals are its row
        assert sets[counter_set_name(0)]["multiprocessors"]["value"] == "132"
        assert sets[counter_set_name(0)]["memory"]["value"] == mebibytes(board.profile('7g.80gb').memory_mib)


@pytest.mark.parametrize("minor", MINORS)
@pytest.mark.parametrize("key", BOARDS)
def test_whole_and_static_slices(key: str, minor: str, node, nvml: NvmlLibrary) -> None:
    board = get_board(key)
    bodies = build_slices("n", inventory(nvml, node(key, 8)), parse_mode("whole"), api_limits(minor), IDENTITY)
    check_limits(bodies, api_limits(minor))
    devices = devices_of(bodies)
    assert set(devices) == {f"gpu-{i}" for i in range(8)}
    assert devices["gpu-0"]["capacity"]["memory"]["value"] == mebibytes(board.memory_mib)
    assert devices["gpu-0"]["attributes"]["productName"]["string"] == board.product_name
    assert set(usable_layouts(board)) == set(board.mig_layouts)  # every named layout, B200/GB200 3g/4g/7g ones too
    for name, layout in usable_layouts(board).items():
        path = node(key, 2)
        with nvml.session(path):
            miglayout.apply_layout(layout)
        inv = inventory(nvml, path)
        bodies = build_slices("n", inv, parse_mode(f"static-mig:{name}"), api_limits(minor), IDENTITY)
        check_limits(bodies, api_limits(minor))
        devices = devices_of(bodies).values()
        profiles = sorted(d["attributes"]["profile"]["string"] for d in devices)
        assert profiles == sorted(p for p, n in layout.items() for _ in range(n * 2)), name
        assert all(d["attributes"]["type"]["string"] == "mig" and d["attributes"]["uuid"]["string"].startswith("MIG-") for d in devices)
        assert {d["attributes"]["uuid"]["string"] for d in devices} == {m.uuid for g in inv.gpus for m in g.mig_devices}


def test_static_layout_survives_a_restart_unchanged(node, nvml: NvmlLibrary) -> None:
    path = node("h100-80gb", 1)
    layout = usable_layouts(get_board("h100-80gb"))["all-balanced"]
    with nvml.session(path):
        miglayout.apply_layout(layout)
    first = inventory(nvml, path)
    with nvml.session(path):
        miglayout.apply_layout(layout)
    assert inventory(nvml, path) == first  # same MIG UUIDs: nothing re-created


def test_static_layout_with_a_profile_nvml_does_not_offer(node, nvml: NvmlLibrary) -> None:
    path = node("b200-180gb", 1)
    with nvml.session(path), pytest.raises(miglayout.MigLayoutError, match="NVML offers no MIG profile '3g.40gb'"):
        miglayout.apply_layout({"3g.40gb": 2})  # an H100 profile


def test_faults_change_the_slices(node, nvml: NvmlLibrary) -> None:
    inv = inventory(nvml, node("h100-80gb", 1))
    def build(mode: str, *faults: str) -> dict:
        return devices_of(build_slices("n", inv, parse_mode(mode), LIMITS_1_34, IDENTITY, frozenset(faults)))
    def counters(mode: str, *faults: str) -> dict:
        bodies = build_slices("n", inv, parse_mode(mode), LIMITS_1_34, IDENTITY, frozenset(faults))
        return bodies[0]["spec"]["sharedCounters"][0]["counters"]
    assert build("whole", "wrong-memory")["gpu-0"]["capacity"]["memory"]["value"] == mebibytes(2 * inv.gpus[0].memory_mib)
    assert counters("dynamic-mig", "oversized-counters")["multiprocessors"]["value"] == "264"
    assert counters("dynamic-mig", "oversized-counters")["memory-slice-0"]["value"] == "2"
    short = build("dynamic-mig", "short-placement")["gpu-0-mig-3g40gb-9-4"]["consumesCounters"][0]["counters"]
    assert {c for c in short if c.startswith("memory-slice-")} == {"memory-slice-4", "memory-slice-5", "memory-slice-6"}
    assert "consumesCounters" in build("dynamic-mig")["gpu-0"]
    assert "consumesCounters" not in build("dynamic-mig", "counters-undeclared")["gpu-0"]
    assert "consumesCounters" in build("dynamic-mig", "counters-undeclared")["gpu-0-mig-3g40gb-9-4"]


@pytest.mark.parametrize("fault", sorted(UNDERDECLARED))
def test_underdeclared_profile_leaves_out_one_counter(fault: str, node, nvml: NvmlLibrary) -> None:
    """Each switch drops exactly its profile's named memory slices; every other device is as without it."""
    profile, which = UNDERDECLARED[fault]
    board = next(b for b in all_boards() if any(p.name == profile for p in b.gpu_instance_profiles))
    inv = inventory(nvml, node(board.key, 1))
    clean, faulty = (devices_of(build_slices("n", inv, parse_mode("dynamic-mig"), LIMITS_1_34, IDENTITY, frozenset(f)))
                     for f in ((), (fault,)))
    changed = {name for name in clean if clean[name] != faulty[name]}
    catalog = board.profile(profile)
    assert changed == {mig_device_name(0, profile, catalog.id, start) for start in catalog.placements}
    for name in changed:
        start = parse_device_name(name).start
        placement = range(start, start + catalog.memory_slices)
        kept = {c for c in faulty[name]["consumesCounters"][0]["counters"] if c.startswith("memory-slice-")}
        dropped = {memory_slice_counter(i) for i in placement} - kept
        expected = {"first": placement[:1], "last": placement[-1:], "middle": placement[1:2], "all": placement}[which]
        assert dropped == {memory_slice_counter(i) for i in expected}, name


@pytest.mark.parametrize("text", ["shared", "static-mig", "static-mig:", "whole:x", "dynamic-mig:a"])
def test_unknown_mode(text: str) -> None:
    with pytest.raises(ModeError, match="valid modes: whole, static-mig:<layout>, dynamic-mig"):
        parse_mode(text)


def test_limits_per_minor() -> None:
    assert api_limits("1.34") is LIMITS_1_34
    assert api_limits("1.35") is api_limits("v1.37") is LIMITS_1_35
    with pytest.raises(ValueError):
        api_limits("1.33")
