"""MIG through nvidia-ml-py: every profile x placement, overlap and capacity refusals, every maximal
layout of each board, MIG devices and the error codes with MIG off. Expectations come from the catalog."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from fake_gpus.catalog import get_board
from fake_gpus.nvml import state
from nvml_helpers import mig_board_keys, n, nvml_code
from nvml_mig_model import GpuModel, ci_starts, gi_id, maximal_layouts, overlapping_pairs


def _placement(start: int, size: int):
    """A pointer to a placement: pynvml hands its argument to C as is, and C takes a pointer."""
    p = pynvml.c_nvmlGpuInstancePlacement_t()
    p.start, p.size = start, size
    return ctypes.pointer(p)


def _ci_placement(start: int, size: int):
    p = pynvml.c_nvmlComputeInstancePlacement_t()
    p.start, p.size = start, size
    return ctypes.pointer(p)


def _gi_rows(h) -> list[tuple[int, int, int, int]]:
    """(id, profile id, start, size) of every GPU instance, through NVML."""
    rows = []
    for p in get_board_of(h).gpu_instance_profiles:
        buf = (pynvml.c_nvmlGpuInstance_t * max(1, n(p.max_instances)))()
        count = ctypes.c_uint()
        pynvml.nvmlDeviceGetGpuInstances(h, p.id, buf, ctypes.byref(count))
        for i in range(count.value):
            info = pynvml.nvmlGpuInstanceGetInfo(buf[i])
            rows.append((info.id, info.profileId, info.placement.start, info.placement.size))
    return sorted(rows)


_BOARD_OF: dict[int, object] = {}


def get_board_of(h):
    return _BOARD_OF[ctypes.addressof(h.contents)]


def _gpu(key: str):
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    _BOARD_OF[ctypes.addressof(h.contents)] = get_board(key)
    return h


def _err(fn, *args) -> int:
    with pytest.raises(pynvml.NVMLError) as e:
        fn(*args)
    return nvml_code(e)


@pytest.mark.parametrize("key", mig_board_keys())
def test_every_profile_and_placement(make_node, key):
    board = get_board(key)
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    for p in board.gpu_instance_profiles:
        for start in p.placements:
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, p.id, _placement(start, p.memory_slices))
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert (info.profileId, info.placement.start, info.placement.size) == (p.id, start, p.memory_slices)
            assert info.id == gi_id(board, start, p.memory_slices)
            assert ctypes.addressof(info.device.contents) == ctypes.addressof(h.contents)
            by_id = pynvml.nvmlDeviceGetGpuInstanceById(h, info.id)
            assert ctypes.addressof(by_id.contents) == ctypes.addressof(gi.contents)
            # One compute instance of every compute profile the GPU instance offers, each at its first placement.
            for cp in p.compute_instance_profiles:
                cinfo = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, cp.nvml_profile, 0)
                assert (cinfo.id, cinfo.sliceCount, cinfo.multiprocessorCount, cinfo.name) == (
                    cp.id, cp.slice_count, n(cp.multiprocessors), cp.name)
                assert cinfo.instanceCount == p.slice_count // cp.slice_count
                assert cinfo.sharedCopyEngineCount == n(p.copy_engines)
                ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, cp.id)
                ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
                assert (ci_info.id, ci_info.profileId, ci_info.placement.start, ci_info.placement.size) == (0, cp.id, 0, cp.slice_count)
                mig = ci_info.device
                assert pynvml.nvmlDeviceIsMigDeviceHandle(mig).value == 1
                uuid = pynvml.nvmlDeviceGetUUID(mig)
                assert uuid.startswith("MIG-") and len(uuid) == 40
                assert pynvml.nvmlDeviceGetGpuInstanceId(mig) == info.id
                assert pynvml.nvmlDeviceGetComputeInstanceId(mig) == 0
                assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == n(p.memory_mib) * 2**20
                parent = pynvml.nvmlDeviceGetDeviceHandleFromMigDeviceHandle(mig)
                assert ctypes.addressof(parent.contents) == ctypes.addressof(h.contents)
                assert pynvml.nvmlDeviceGetName(mig).endswith(" MIG " + (cp.name if cp.slice_count < p.slice_count else p.name))
                assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)) == uuid
                assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(uuid)) == uuid
                assert _err(pynvml.nvmlGpuInstanceDestroy, gi) == pynvml.NVML_ERROR_IN_USE
                pynvml.nvmlComputeInstanceDestroy(ci)
                assert _err(pynvml.nvmlDeviceGetUUID, mig) == pynvml.NVML_ERROR_INVALID_ARGUMENT  # gone
            pynvml.nvmlGpuInstanceDestroy(gi)
            assert _err(pynvml.nvmlGpuInstanceGetInfo, gi) == pynvml.NVML_ERROR_INVALID_ARGUMENT
            assert _gi_rows(h) == []


@pytest.mark.parametrize("key", mig_board_keys())
def test_overlap_is_refused(make_node, key):
    board = get_board(key)
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    for (a, sa), (b, sb) in overlapping_pairs(board):
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, a.id, _placement(sa, a.memory_slices))
        code = _err(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, h, b.id, _placement(sb, b.memory_slices))
        assert code == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES, (a.name, sa, b.name, sb)
        pynvml.nvmlGpuInstanceDestroy(gi)


@pytest.mark.parametrize("key", mig_board_keys())
def test_over_capacity_is_refused(make_node, key):
    board = get_board(key)
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    for p in board.gpu_instance_profiles:
        model = GpuModel(board)
        made = []
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p.id) == p.max_instances
        while (start := model.default_start(p)) is not None:
            gi = pynvml.nvmlDeviceCreateGpuInstance(h, p.id)
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert info.placement.start == start, p.name  # highest free placement first
            model.gis[info.id] = (p, start)
            made.append(gi)
        assert len(made) == p.max_instances
        assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p.id) == 0
        assert _err(pynvml.nvmlDeviceCreateGpuInstance, h, p.id) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        for gi in made:
            pynvml.nvmlGpuInstanceDestroy(gi)


@pytest.mark.parametrize("key", mig_board_keys())
def test_every_maximal_layout_is_creatable(make_node, key):
    board = get_board(key)
    by_id = {p.id: p for p in board.gpu_instance_profiles}
    layouts = maximal_layouts(board)
    assert layouts
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    for layout in layouts:
        made = [pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, pid, _placement(s, by_id[pid].memory_slices)) for pid, s in layout]
        assert sorted((pid, s) for _, pid, s, _ in _gi_rows(h)) == sorted(layout)
        for p in board.gpu_instance_profiles:  # maximal: nothing else fits
            assert pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p.id) == 0, (layout, p.name)
        for gi in made:
            pynvml.nvmlGpuInstanceDestroy(gi)


def test_compute_instances_inside_a_gpu_instance(make_node):
    key = mig_board_keys()[0]
    board = get_board(key)
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    full = max(board.gpu_instance_profiles, key=lambda p: p.slice_count)
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, full.id)
    for cp in full.compute_instance_profiles:
        starts = ci_starts(full.slice_count, cp.slice_count)
        count = ctypes.c_uint()
        pynvml.nvmlGpuInstanceGetComputeInstancePossiblePlacements(gi, cp.id, None, ctypes.byref(count))
        assert count.value == len(starts)
        assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, cp.id) == len(starts)
        made = [pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, cp.id, _ci_placement(s, cp.slice_count)) for s in starts]
        assert [pynvml.nvmlComputeInstanceGetInfo(c).id for c in made] == list(range(len(starts)))
        assert _err(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, cp.id) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        if len(starts) > 1:  # the MIG device walk sees them all, then an empty slot
            uuids = {pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)) for i in range(len(starts))}
            assert len(uuids) == len(starts)
        if len(starts) < pynvml.nvmlDeviceGetMaxMigDeviceCount(h):
            assert _err(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, len(starts)) == pynvml.NVML_ERROR_NOT_FOUND
        for c in made:
            pynvml.nvmlComputeInstanceDestroy(c)
    # An overlapping compute placement is refused, a misaligned one is invalid.
    one = next(cp for cp in full.compute_instance_profiles if cp.slice_count == 1)
    two = next(cp for cp in full.compute_instance_profiles if cp.slice_count == 2)
    c0 = pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement(gi, one.id, _ci_placement(1, 1))
    assert _err(pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, two.id, _ci_placement(0, 2)) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert _err(pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, two.id, _ci_placement(1, 2)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert _err(pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo, gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT, 0) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert _err(pynvml.nvmlGpuInstanceGetComputeInstanceById, gi, 5) == pynvml.NVML_ERROR_NOT_FOUND
    # MIG mode cannot be switched off while instances exist.
    assert _err(pynvml.nvmlDeviceSetMigMode, h, pynvml.NVML_DEVICE_MIG_DISABLE) == pynvml.NVML_ERROR_IN_USE
    pynvml.nvmlComputeInstanceDestroy(c0)
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]


def test_bad_profile_and_placement(make_node):
    key = mig_board_keys()[0]
    board = get_board(key)
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    unknown_id = max(p.id for p in board.gpu_instance_profiles) + 1
    assert _err(pynvml.nvmlDeviceCreateGpuInstance, h, unknown_id) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert _err(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, h, unknown_id) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    p = next(p for p in board.gpu_instance_profiles if p.memory_slices > 1)
    bad_start = next(s for s in range(board.memory_slices) if s not in p.placements)
    assert _err(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, h, p.id, _placement(bad_start, p.memory_slices)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert _err(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, h, p.id, _placement(p.placements[0], p.memory_slices + 1)) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert _err(pynvml.nvmlDeviceGetGpuInstanceById, h, 3) == pynvml.NVML_ERROR_NOT_FOUND
    assert _err(pynvml.nvmlDeviceSetMigMode, h, 2) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_calls_with_mig_off(make_node):
    key = mig_board_keys()[0]
    board = get_board(key)
    make_node([(key, 1)], mig=False)
    h = _gpu(key)
    p = board.gpu_instance_profiles[0]
    # Profiles and placements are readable with MIG off (the DRA driver reads them at start-up) ...
    assert pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, p.nvml_profile).id == p.id
    count = ctypes.c_uint()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, None, ctypes.byref(count))
    assert count.value == len(p.placements)
    # ... but instances need MIG on.
    assert _err(pynvml.nvmlDeviceCreateGpuInstance, h, p.id) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _err(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, h, p.id, _placement(p.placements[0], p.memory_slices)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _err(pynvml.nvmlDeviceGetGpuInstanceRemainingCapacity, h, p.id) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _err(pynvml.nvmlDeviceGetGpuInstanceById, h, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED
    buf = (pynvml.c_nvmlGpuInstance_t * 8)()
    assert _err(pynvml.nvmlDeviceGetGpuInstances, h, p.id, buf, ctypes.byref(count)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _err(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, 0) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert _err(pynvml.nvmlDeviceGetGpuInstanceId, h) == pynvml.NVML_ERROR_NOT_SUPPORTED
    # Enabling reports activationStatus 0 and takes effect at once.
    assert pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE) == 0
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]


def test_state_is_shared_and_reset(make_node):
    key = mig_board_keys()[0]
    board = get_board(key)
    d = make_node([(key, 2)], mig=True)
    h = _gpu(key)
    p = board.gpu_instance_profiles[0]
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, p.id)
    pynvml.nvmlGpuInstanceCreateComputeInstance(gi, p.compute_instance_profiles[-1].id)
    _, mig = state.validate_state_dir(d)
    assert [(r.gpu, r.profile_id) for r in mig.gpu_instances] == [(0, p.id)]
    assert len(mig.compute_instances) == 1 and mig.compute_instances[0].uuid.startswith("MIG-")
    state.reset_state_dir(d)
    assert _err(pynvml.nvmlGpuInstanceGetInfo, gi) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]


def _double_memory_1g_boards() -> list[str]:
    """Boards whose 1-slice GI over 2 memory slices has more SMs than the plain 1g (Hopper, Blackwell; on A100 both have 14)."""
    out = []
    for key in mig_board_keys():
        gis = {p.nvml_profile: p for p in get_board(key).gpu_instance_profiles}
        if 9 in gis and gis[9].multiprocessors > gis[0].multiprocessors:
            out.append(key)
    return out


@pytest.mark.parametrize("key", _double_memory_1g_boards())
def test_double_memory_1g_has_two_compute_instance_profiles(make_node, key):
    """A 1g.20gb-like GPU instance answers CI profiles 1_SLICE (the 1g's SMs) and 1_SLICE_REV1 (its own, the
    default), and holds one compute instance of either: they take the same compute slice."""
    board = get_board(key)
    gp = next(p for p in board.gpu_instance_profiles if p.nvml_profile == pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2)
    one = next(p for p in board.gpu_instance_profiles if p.nvml_profile == pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    make_node([(key, 1)], mig=True)
    h = _gpu(key)
    gi = pynvml.nvmlDeviceCreateGpuInstance(h, gp.id)
    plain = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 0)
    rev1 = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE_REV1, 0)
    assert (plain.id, plain.sliceCount, plain.multiprocessorCount) == (0, 1, one.multiprocessors)
    assert (rev1.id, rev1.sliceCount, rev1.multiprocessorCount) == (7, 1, gp.multiprocessors)
    for first, second in ((plain.id, rev1.id), (rev1.id, plain.id)):
        ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, first)
        assert pynvml.nvmlGpuInstanceGetComputeInstanceRemainingCapacity(gi, second) == 0
        assert _err(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, second) == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
        pynvml.nvmlComputeInstanceDestroy(ci)
    pynvml.nvmlGpuInstanceDestroy(gi)
