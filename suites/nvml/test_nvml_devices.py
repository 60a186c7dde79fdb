"""Whole-GPU facts through nvidia-ml-py, life cycle, argument checks and the generated stubs."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from fake_gpus.catalog import get_board
from fake_gpus.nvml import state
from fake_gpus.nvml.build import declared_functions, nvml_header

from nvml_helpers import board_keys, n, nvml_code


@pytest.mark.parametrize("key", board_keys())
def test_catalog_facts_through_nvml(make_node, key):
    board = get_board(key)
    d = make_node([(key, 2)])
    gpus, _ = state.validate_state_dir(d)
    assert pynvml.nvmlDeviceGetCount() == 2
    assert pynvml.nvmlSystemGetDriverVersion() == board.driver_version
    assert pynvml.nvmlSystemGetCudaDriverVersion() == board.cuda_driver_version
    assert pynvml.nvmlSystemGetCudaDriverVersion_v2() == board.cuda_driver_version
    assert pynvml.nvmlSystemGetNVMLVersion().endswith(board.driver_version)
    for i, rec in enumerate(gpus):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetName(h) == board.product_name
        assert pynvml.nvmlDeviceGetUUID(h) == rec.uuid and rec.uuid.startswith("GPU-")
        assert pynvml.nvmlDeviceGetSerial(h) == rec.serial
        assert pynvml.nvmlDeviceGetMinorNumber(h) == rec.minor
        assert pynvml.nvmlDeviceGetIndex(h) == i
        pci = pynvml.nvmlDeviceGetPciInfo_v3(h)
        assert pci.busId == rec.bus_id and len(pci.busId.split(":")[0]) == 8
        assert pci.pciDeviceId == n(board.pci_device_id)
        assert pci.pciSubSystemId == n(board.pci_subsystem_id)
        assert pynvml.nvmlDeviceGetPciInfo(h).bus == int(rec.bus_id.split(":")[1], 16)
        mem = pynvml.nvmlDeviceGetMemoryInfo(h)
        assert mem.total == n(board.memory_mib) * 2**20 and mem.free + mem.used == mem.total
        mem2 = pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2)
        assert mem2.total == n(board.memory_mib) * 2**20
        assert pynvml.nvmlDeviceGetArchitecture(h) == board.nvml_architecture
        assert pynvml.nvmlDeviceGetBrand(h) == board.nvml_brand
        assert tuple(pynvml.nvmlDeviceGetCudaComputeCapability(h)) == tuple(board.cuda_compute_capability)
        if board.mig_capable:
            assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
        else:  # a T4, L4 or L40S has no MIG: real NVML answers its mode NOT_SUPPORTED
            with pytest.raises(pynvml.NVMLError_NotSupported):
                pynvml.nvmlDeviceGetMigMode(h)
        assert pynvml.nvmlDeviceIsMigDeviceHandle(h).value == 0  # pynvml hands back the c_uint
        # Lookups by UUID and PCI bus id (full and short form) return the same handle.
        assert ctypes.addressof(pynvml.nvmlDeviceGetHandleByUUID(rec.uuid).contents) == ctypes.addressof(h.contents)
        assert ctypes.addressof(pynvml.nvmlDeviceGetHandleByPciBusId(rec.bus_id).contents) == ctypes.addressof(h.contents)
        assert ctypes.addressof(pynvml.nvmlDeviceGetHandleByPciBusId(rec.bus_id[4:].lower()).contents) == ctypes.addressof(h.contents)
    with pytest.raises(pynvml.NVMLError) as e:
        pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")
    assert nvml_code(e) == pynvml.NVML_ERROR_NOT_FOUND
    with pytest.raises(pynvml.NVMLError) as e:
        pynvml.nvmlDeviceGetHandleByIndex(2)
    assert nvml_code(e) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_mig_profile_facts(make_node):
    """Every GPU-instance profile of every board, by enum (v1 and V), plus placements (v2, NULL = count)."""
    for key in board_keys():
        board = get_board(key)
        make_node([(key, 1)])
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        by_enum = {p.nvml_profile: p for p in board.gpu_instance_profiles}
        for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT + 2):
            if enum not in by_enum:
                with pytest.raises(pynvml.NVMLError) as e:
                    pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
                # a board without MIG answers every MIG call NOT_SUPPORTED, whatever the argument
                out_of_range = enum >= pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT and board.mig_capable
                want = pynvml.NVML_ERROR_INVALID_ARGUMENT if out_of_range else pynvml.NVML_ERROR_NOT_SUPPORTED
                assert nvml_code(e) == want, (key, enum)
                continue
            p = by_enum[enum]
            if not p.complete:
                # unknown counts are not reported as zeros: the profile reads as unsupported
                for version in (1, 2):
                    with pytest.raises(pynvml.NVMLError) as e:
                        pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum, version=version)
                    assert nvml_code(e) == pynvml.NVML_ERROR_NOT_SUPPORTED, (key, p.name, version)
                with pytest.raises(pynvml.NVMLError) as e:
                    pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(h, p.id)
                assert nvml_code(e) == pynvml.NVML_ERROR_NOT_SUPPORTED, (key, p.name)
                continue
            for version in (1, 2):
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, enum, version=version)
                assert (info.id, info.sliceCount, info.instanceCount, info.multiprocessorCount, info.memorySizeMB) == (
                    p.id, n(p.slice_count), n(p.max_instances), n(p.multiprocessors), n(p.memory_mib)), (key, p.name)
                assert (info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount) == (
                    n(p.copy_engines), n(p.decoders), n(p.encoders), n(p.jpeg_engines), n(p.ofa_engines))
                assert info.isP2pSupported == int(bool(p.p2p_supported))
                if version == 2:
                    assert info.name == p.name
            byid = pynvml.nvmlDeviceGetGpuInstanceProfileInfoById(h, p.id)
            assert byid.name == p.name
            count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, None, ctypes.byref(count))
            assert count.value == len(p.placements)
            buf = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
            pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, buf, ctypes.byref(count))
            assert [(x.start, x.size) for x in buf] == [(s, p.memory_slices) for s in p.placements]


def test_init_is_reference_counted(make_node):
    make_node()
    pynvml.nvmlInit()  # a second user in the same process
    pynvml.nvmlShutdown()  # ... leaves: the first user's session goes on
    assert pynvml.nvmlDeviceGetCount() == 1
    pynvml.nvmlInitWithFlags(pynvml.NVML_INIT_FLAG_NO_GPUS)
    pynvml.nvmlShutdown()
    assert pynvml.nvmlDeviceGetCount() == 1


def test_uninitialized_and_null_arguments(nvml_lib, make_node):
    lib = nvml_lib
    count = ctypes.c_uint()
    assert lib.nvmlDeviceGetCount_v2(ctypes.byref(count)) == pynvml.NVML_ERROR_UNINITIALIZED
    assert lib.nvmlShutdown() == pynvml.NVML_ERROR_UNINITIALIZED
    make_node()
    assert lib.fakeNvmlSetStateDir(b"/elsewhere") == pynvml.NVML_ERROR_IN_USE
    assert lib.nvmlDeviceGetCount_v2(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlDeviceGetHandleByIndex_v2(0, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert lib.nvmlDeviceGetName(h, None, 64) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlDeviceGetUUID(h, ctypes.create_string_buffer(8), 8) == pynvml.NVML_ERROR_INSUFFICIENT_SIZE
    assert lib.nvmlDeviceGetMigMode(h, None, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlDeviceGetMemoryInfo(h, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlDeviceGetHandleByUUID(None, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    # A handle that points at nothing the library handed out is refused, not dereferenced.
    bogus = ctypes.c_void_p(0x1234)
    assert lib.nvmlDeviceGetName(bogus, ctypes.create_string_buffer(64), 64) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlGpuInstanceDestroy(bogus) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert lib.nvmlComputeInstanceDestroy(None) == pynvml.NVML_ERROR_INVALID_ARGUMENT


def test_error_string_for_every_code():
    codes = [v for k, v in vars(pynvml).items() if k.startswith("NVML_ERROR_") and isinstance(v, int)] + [pynvml.NVML_SUCCESS]
    for code in codes:
        text = pynvml.nvmlErrorString(code)
        assert text and isinstance(text, str)
    assert pynvml.nvmlErrorString(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES) != pynvml.nvmlErrorString(pynvml.NVML_ERROR_IN_USE)


def test_every_nvml_h_function_is_exported(nvml_lib):
    names = declared_functions(nvml_header().read_text(errors="replace"))
    assert len(names) > 300
    missing = [n for n in names if not hasattr(nvml_lib, n)]
    assert not missing
    for versioned in ("nvmlInit", "nvmlInit_v2", "nvmlDeviceGetCount_v2", "nvmlDeviceGetHandleByIndex_v2",
                      "nvmlDeviceGetPciInfo_v3", "nvmlDeviceGetGpuInstancePossiblePlacements_v2",
                      "nvmlComputeInstanceGetInfo_v2", "nvmlEventSetWait_v2", "fakeNvmlSetStateDir"):
        assert hasattr(nvml_lib, versioned)


def test_unmodelled_call_returns_not_supported(nvml_lib, make_node):
    make_node()
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    speed = ctypes.c_uint()
    assert nvml_lib.nvmlDeviceGetFanSpeed(h, ctypes.byref(speed)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_lib.nvmlDeviceGetPowerUsage(h, ctypes.byref(speed)) == pynvml.NVML_ERROR_NOT_SUPPORTED
    with pytest.raises(pynvml.NVMLError_NotSupported):
        pynvml.nvmlDeviceGetTemperature(h, pynvml.NVML_TEMPERATURE_GPU)
