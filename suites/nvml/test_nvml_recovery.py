"""NVML's GPU recovery action in the fake (nvmlDeviceGetFieldValues, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION),
through nvidia-ml-py: pending after a fatal Xid as the Xid catalog says, back to none after `heal`.

The first fault of each test crosses processes (inject, as `dra-testbed gpu fail` does on a node); the
sweep over the whole catalog appends in-process, the library reads the same log either way.
"""

from __future__ import annotations

import ctypes
import subprocess
import time
from pathlib import Path

import pynvml
import pytest

from fake_gpus.catalog import xids
from fake_gpus.nvml import health
from test_nvml_events import inject

RECOVERY = pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION
NONE = pynvml.NVML_GPU_RECOVERY_ACTION_NONE
GPU_RESET = pynvml.NVML_GPU_RECOVERY_ACTION_GPU_RESET


def recovery_entry(handle, scope: int = 0):
    [entry] = pynvml.nvmlDeviceGetFieldValues(handle, [(RECOVERY, scope)])
    return entry


def recovery(handle) -> int:
    entry = recovery_entry(handle)
    assert entry.nvmlReturn == pynvml.NVML_SUCCESS
    assert entry.valueType == pynvml.NVML_VALUE_TYPE_UNSIGNED_INT
    return entry.value.uiVal


def test_recovery_action_pending_after_a_fatal_xid_until_heal(make_node):
    node = make_node([("h100-80gb", 2)])
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    assert (recovery(gpu0), recovery(gpu1)) == (NONE, NONE)
    inject(node, 0, "xid", 79)
    # the catalog: a GPU off the bus is past a GPU reset, the machine restarts
    assert recovery(gpu0) == pynvml.NVML_GPU_RECOVERY_ACTION_NODE_REBOOT == xids.recovery_action(79)
    assert recovery(gpu1) == NONE, "GPU 0's Xid made GPU 1 wait for a reset"
    inject(node, 1, "xid", 48)
    inject(node, 1, "xid", 13)  # an application Xid after it does not clear the pending reset
    assert recovery(gpu1) == GPU_RESET
    inject(node, 0, "heal")
    assert (recovery(gpu0), recovery(gpu1)) == (NONE, GPU_RESET)
    inject(node, 1, "heal")
    assert recovery(gpu1) == NONE


def test_each_catalog_xid_sets_its_documented_action(make_node):
    node = make_node()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    seen = {}
    for number in sorted(xids.XIDS) + [555]:  # 555: an Xid the catalog does not name
        health.append(node, 0, "xid", number)
        seen[number] = recovery(gpu)
        health.append(node, 0, "heal")
        assert recovery(gpu) == NONE, f"heal after Xid {number} left an action pending"
    assert seen == {n: xids.recovery_action(n) for n in seen}
    assert seen[555] == xids.RECOVERY_UNLISTED == GPU_RESET
    for ignored in (13, 31, 43, 45, 68, 109):  # application Xids: nothing to do to the GPU
        assert seen[ignored] == NONE


def test_unsupported_field_is_per_entry_and_entries_keep_their_layout(make_node):
    node = make_node()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    inject(node, 0, "xid", 95)
    before_us = time.time() * 1e6
    entries = pynvml.nvmlDeviceGetFieldValues(gpu, [(pynvml.NVML_FI_DEV_ECC_CURRENT, 3), (RECOVERY, 7), (9999, 5)])
    after_us = time.time() * 1e6
    assert [(e.fieldId, e.scopeId) for e in entries] == [(pynvml.NVML_FI_DEV_ECC_CURRENT, 3), (RECOVERY, 7), (9999, 5)]
    assert [e.nvmlReturn for e in entries] == [pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_SUCCESS, pynvml.NVML_ERROR_NOT_SUPPORTED]
    assert entries[1].value.uiVal == GPU_RESET
    assert all(before_us - 1e6 <= e.timestamp <= after_us + 1e6 for e in entries), "timestamp is microseconds since 1970"
    assert pynvml.nvmlDeviceGetFieldValues(gpu, []) is not None  # no fields: SUCCESS, nothing written


def test_field_value_struct_matches_nvml_h(nvml_lib_dir: Path, tmp_path: Path):
    """nvidia-ml-py's c_nvmlFieldValue_t has nvml.h's layout, so the fake (compiled against nvml.h) and
    pynvml read the same bytes."""
    header = nvml_lib_dir / "build" / "include" / "nvml.h"
    members = ("fieldId", "scopeId", "timestamp", "latencyUsec", "valueType", "nvmlReturn", "value")
    src = tmp_path / "layout.c"
    src.write_text('#include <stddef.h>\n#include <stdio.h>\n#include "nvml.h"\nint main(void) {\n'
                   + "".join(f'  printf("%zu ", offsetof(nvmlFieldValue_t, {m}));\n' for m in members)
                   + '  printf("%zu\\n", sizeof(nvmlFieldValue_t));\n  return 0;\n}\n')
    subprocess.run(["gcc", f"-I{header.parent}", str(src), "-o", str(tmp_path / "layout")], check=True)
    c_layout = [int(n) for n in subprocess.run([str(tmp_path / "layout")], capture_output=True, text=True, check=True).stdout.split()]
    struct = pynvml.c_nvmlFieldValue_t
    assert c_layout == [getattr(struct, m).offset for m in members] + [ctypes.sizeof(struct)]


@pytest.fixture
def mig_gpu(three_gpu_node, nvml_lib):
    """(state dir, GPU 1's handle, the handle of its first MIG device) with NVML initialized on the node."""
    node, _, uuids = three_gpu_node
    assert nvml_lib.fakeNvmlSetStateDir(str(node).encode()) == 0
    pynvml.nvmlInit()
    yield node, pynvml.nvmlDeviceGetHandleByIndex(1), pynvml.nvmlDeviceGetHandleByUUID(uuids[0])
    pynvml.nvmlShutdown()
    nvml_lib.fakeNvmlSetStateDir(None)


def test_mig_handle_and_lost_gpu(mig_gpu):
    node, gpu1, mig = mig_gpu
    inject(node, 1, "xid", 48, pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig))
    # the action belongs to the whole GPU: the parent answers it, the MIG device's entry does not
    assert recovery(gpu1) == GPU_RESET
    assert recovery_entry(mig).nvmlReturn == pynvml.NVML_ERROR_NOT_SUPPORTED
    inject(node, 1, "lost")
    for handle in (gpu1, mig):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetFieldValues(handle, [RECOVERY])
    inject(node, 1, "heal")
    assert recovery(gpu1) == NONE


def test_bad_arguments(make_node, nvml_lib):
    make_node()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    fn = nvml_lib.nvmlDeviceGetFieldValues
    fn.argtypes = [pynvml.c_nvmlDevice_t, ctypes.c_int, ctypes.c_void_p]
    assert fn(gpu, 1, None) == pynvml.NVML_ERROR_INVALID_ARGUMENT
    assert fn(pynvml.c_nvmlDevice_t(), 1, ctypes.byref(pynvml.c_nvmlFieldValue_t())) == pynvml.NVML_ERROR_INVALID_ARGUMENT
