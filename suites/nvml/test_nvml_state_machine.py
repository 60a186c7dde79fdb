"""Hypothesis state machine: random create/destroy of GPU and compute instances through
nvidia-ml-py, checked step by step against the Python slice-occupancy model."""

from __future__ import annotations

import ctypes

import pynvml
import pytest
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, precondition, rule, run_state_machine_as_test

from fake_gpus.catalog import get_board
from nvml_helpers import mig_board_keys
from nvml_mig_model import GpuModel, ci_starts, gi_id


def _code(fn, *args):
    try:
        return fn(*args), pynvml.NVML_SUCCESS
    except pynvml.NVMLError as e:
        return None, e.value


def _ptr(cls, start, size):
    p = cls()
    p.start, p.size = start, size
    return ctypes.pointer(p)


def make_machine(board, handle):
    profiles = board.gpu_instance_profiles

    class MigMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.model = GpuModel(board)
            self.gi_handles: dict[int, object] = {}
            self.ci_handles: dict[tuple[int, int], object] = {}

        @rule(profile=st.sampled_from(profiles), data=st.data(), with_placement=st.booleans())
        def create_gi(self, profile, data, with_placement):
            if with_placement:
                start = data.draw(st.sampled_from(profile.placements), label="start")
                expect = start if self.model.fits(profile, start) else None
                gi, rc = _code(pynvml.nvmlDeviceCreateGpuInstanceWithPlacement, handle, profile.id,
                               _ptr(pynvml.c_nvmlGpuInstancePlacement_t, start, profile.memory_slices))
            else:
                expect = self.model.default_start(profile)
                gi, rc = _code(pynvml.nvmlDeviceCreateGpuInstance, handle, profile.id)
            if expect is None:
                assert rc == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
                return
            assert rc == pynvml.NVML_SUCCESS
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            assert (info.profileId, info.placement.start) == (profile.id, expect)
            assert info.id == gi_id(board, expect, profile.memory_slices) and info.id not in self.model.gis
            self.model.gis[info.id] = (profile, expect)
            self.model.cis[info.id] = {}
            self.gi_handles[info.id] = gi

        @precondition(lambda self: self.model.gis)
        @rule(data=st.data())
        def destroy_gi(self, data):
            gid = data.draw(st.sampled_from(sorted(self.model.gis)), label="gi")
            _, rc = _code(pynvml.nvmlGpuInstanceDestroy, self.gi_handles[gid])
            if self.model.cis[gid]:
                assert rc == pynvml.NVML_ERROR_IN_USE
                return
            assert rc == pynvml.NVML_SUCCESS
            del self.model.gis[gid], self.model.cis[gid], self.gi_handles[gid]

        @precondition(lambda self: self.model.gis)
        @rule(data=st.data(), with_placement=st.booleans())
        def create_ci(self, data, with_placement):
            gid = data.draw(st.sampled_from(sorted(self.model.gis)), label="gi")
            gp, _ = self.model.gis[gid]
            cp = data.draw(st.sampled_from(gp.compute_instance_profiles), label="ci profile")
            gi = self.gi_handles[gid]
            if with_placement:
                start = data.draw(st.sampled_from(ci_starts(gp.slice_count, cp.slice_count)), label="ci start")
                expect = start if self.model.ci_fits(gid, cp, start) else None
                ci, rc = _code(pynvml.nvmlGpuInstanceCreateComputeInstanceWithPlacement, gi, cp.id,
                               _ptr(pynvml.c_nvmlComputeInstancePlacement_t, start, cp.slice_count))
            else:
                expect = self.model.ci_default_start(gid, cp)
                ci, rc = _code(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, cp.id)
            if expect is None:
                assert rc == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
                return
            assert rc == pynvml.NVML_SUCCESS
            info = pynvml.nvmlComputeInstanceGetInfo(ci)
            want_id = min(set(range(8)) - set(self.model.cis[gid]))
            assert (info.id, info.profileId, info.placement.start, info.placement.size) == (want_id, cp.id, expect, cp.slice_count)
            self.model.cis[gid][info.id] = (cp, expect)
            self.ci_handles[(gid, info.id)] = ci

        @precondition(lambda self: self.ci_handles)
        @rule(data=st.data())
        def destroy_ci(self, data):
            key = data.draw(st.sampled_from(sorted(self.ci_handles)), label="ci")
            pynvml.nvmlComputeInstanceDestroy(self.ci_handles.pop(key))
            del self.model.cis[key[0]][key[1]]

        @invariant()
        def nvml_agrees_with_model(self):
            for p in profiles:
                buf = (pynvml.c_nvmlGpuInstance_t * p.max_instances)()
                count = ctypes.c_uint()
                pynvml.nvmlDeviceGetGpuInstances(handle, p.id, buf, ctypes.byref(count))
                got = sorted(pynvml.nvmlGpuInstanceGetInfo(buf[i]).placement.start for i in range(count.value))
                assert got == sorted(s for q, s in self.model.gis.values() if q.id == p.id)
            # MIG devices: one per compute instance, then empty slots.
            n_ci = sum(len(c) for c in self.model.cis.values())
            if n_ci < pynvml.nvmlDeviceGetMaxMigDeviceCount(handle):
                _, rc = _code(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, handle, n_ci)
                assert rc == pynvml.NVML_ERROR_NOT_FOUND
            if n_ci:
                assert pynvml.nvmlDeviceIsMigDeviceHandle(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, n_ci - 1)).value == 1

        def teardown(self):
            for ci in self.ci_handles.values():
                pynvml.nvmlComputeInstanceDestroy(ci)
            for gi in self.gi_handles.values():
                pynvml.nvmlGpuInstanceDestroy(gi)

    return MigMachine


@pytest.mark.parametrize("key", mig_board_keys())
def test_mig_state_machine(make_node, key):
    board = get_board(key)
    make_node([(key, 1)], mig=True)
    handle = pynvml.nvmlDeviceGetHandleByIndex(0)
    run_state_machine_as_test(
        make_machine(board, handle),
        settings=settings(max_examples=40, stateful_step_count=40, deadline=None,
                          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow]),
    )
