"""NVML health events of the fake, through nvidia-ml-py, with faults injected by another process.

Each fault is appended by a fresh interpreter calling fake_gpus.nvml.health.append (what
`dra-testbed gpu fail` does on a node), so delivery crosses processes as it does between the
injector and a driver.
"""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pynvml
import pytest

from fake_gpus.nvml import health

XID = pynvml.nvmlEventTypeXidCriticalError
SBE = pynvml.nvmlEventTypeSingleBitEccError
DBE = pynvml.nvmlEventTypeDoubleBitEccError
NO_INSTANCE = 0xFFFFFFFF
REPO = Path(__file__).resolve().parents[2]


def inject(node: Path, gpu: int, kind: str, data: int = 0, gi: int = NO_INSTANCE, ci: int = NO_INSTANCE) -> None:
    """Append one fault from a separate process."""
    code = f"from fake_gpus.nvml import health; health.append({str(node)!r}, {gpu}, {kind!r}, {data}, {gi}, {ci})"
    subprocess.run([sys.executable, "-c", code], check=True, cwd=REPO, timeout=60)


def wait_rc(event_set, timeout_ms: int = 0):
    """(return code, event data or None) of one nvmlEventSetWait."""
    try:
        return pynvml.NVML_SUCCESS, pynvml.nvmlEventSetWait(event_set, timeout_ms)
    except pynvml.NVMLError as e:
        return e.value, None


def registered_set(*handles, mask: int = XID | SBE | DBE):
    s = pynvml.nvmlEventSetCreate()
    for h in handles:
        pynvml.nvmlDeviceRegisterEvents(h, mask, s)
    return s


def test_xid_reaches_every_set_registered_before_exactly_once(make_node):
    node = make_node([("h100-80gb", 2)])
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    first, second, other_gpu = registered_set(gpu0), registered_set(gpu0, gpu1), registered_set(gpu1)
    made_before = pynvml.nvmlEventSetCreate()  # the set exists before the fault, its registration comes after
    inject(node, 0, "xid", 79)
    late = registered_set(gpu0)
    pynvml.nvmlDeviceRegisterEvents(gpu0, XID, made_before)
    for s in (first, second):
        rc, ev = wait_rc(s, 2000)
        assert rc == pynvml.NVML_SUCCESS
        assert (ev.eventType, ev.eventData, ev.gpuInstanceId, ev.computeInstanceId) == (XID, 79, NO_INSTANCE, NO_INSTANCE)
        assert pynvml.nvmlDeviceGetUUID(ev.device) == pynvml.nvmlDeviceGetUUID(gpu0)
        assert wait_rc(s)[0] == pynvml.NVML_ERROR_TIMEOUT, "delivered twice"
    assert wait_rc(other_gpu)[0] == pynvml.NVML_ERROR_TIMEOUT, "GPU 1's set got GPU 0's Xid"
    assert wait_rc(late)[0] == pynvml.NVML_ERROR_TIMEOUT, "a set registered after the fault got it"
    assert wait_rc(made_before)[0] == pynvml.NVML_ERROR_TIMEOUT, "a registration made after the fault got it"
    inject(node, 1, "xid", 48)
    assert wait_rc(second, 2000)[1].eventData == 48
    assert wait_rc(late)[0] == pynvml.NVML_ERROR_TIMEOUT
    for s in (first, second, other_gpu, late, made_before):
        pynvml.nvmlEventSetFree(s)


def test_wait_blocks_until_an_event_from_another_process(make_node):
    node = make_node()
    s = registered_set(pynvml.nvmlDeviceGetHandleByIndex(0))
    code = f"import time; time.sleep(0.3); from fake_gpus.nvml import health; health.append({str(node)!r}, 0, 'xid', 94)"
    injector = subprocess.Popen([sys.executable, "-c", code], cwd=REPO)
    try:
        start = time.monotonic()
        rc, ev = wait_rc(s, 10000)
        took = time.monotonic() - start
    finally:
        injector.wait(timeout=60)
    assert rc == pynvml.NVML_SUCCESS and ev.eventData == 94
    assert took < 5, f"the wait returned {took:.2f}s after it began, far past the injection"
    pynvml.nvmlEventSetFree(s)


def test_wait_times_out_after_the_timeout(make_node):
    make_node()
    s = registered_set(pynvml.nvmlDeviceGetHandleByIndex(0))
    start = time.monotonic()
    assert wait_rc(s, 150)[0] == pynvml.NVML_ERROR_TIMEOUT
    took = time.monotonic() - start
    assert 0.14 <= took < 2, took
    pynvml.nvmlEventSetFree(s)


def test_supported_types_and_registering(make_node):
    make_node()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetSupportedEventTypes(gpu) == XID | SBE | DBE
    s = pynvml.nvmlEventSetCreate()
    with pytest.raises(pynvml.NVMLError_NotSupported):  # PState is not supported; the rest is registered
        pynvml.nvmlDeviceRegisterEvents(gpu, XID | pynvml.nvmlEventTypePState, s)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlDeviceRegisterEvents(gpu, 1 << 62, s)
    pynvml.nvmlEventSetFree(s)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetFree(s)
    with pytest.raises(pynvml.NVMLError_InvalidArgument):
        pynvml.nvmlEventSetWait(s, 0)


def test_mig_xid_names_its_instances_and_mig_handles_cannot_register(three_gpu_node, nvml_lib):
    node, _, uuids = three_gpu_node
    assert nvml_lib.fakeNvmlSetStateDir(str(node).encode()) == 0
    pynvml.nvmlInit()
    try:
        gpu1 = pynvml.nvmlDeviceGetHandleByIndex(1)
        mig = pynvml.nvmlDeviceGetHandleByUUID(uuids[0])
        gi, ci = pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)
        s = pynvml.nvmlEventSetCreate()
        with pytest.raises(pynvml.NVMLError_NotSupported):
            pynvml.nvmlDeviceRegisterEvents(mig, XID, s)
        pynvml.nvmlDeviceRegisterEvents(gpu1, XID, s)
        inject(node, 1, "xid", 31, gi, ci)
        ev = wait_rc(s, 2000)[1]
        assert (ev.eventData, ev.gpuInstanceId, ev.computeInstanceId) == (31, gi, ci)
        assert pynvml.nvmlDeviceGetUUID(ev.device) == pynvml.nvmlDeviceGetUUID(gpu1)
        inject(node, 1, "lost")
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetUUID(mig)  # the handle taken before the fault
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetHandleByUUID(uuids[1])
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            pynvml.nvmlDeviceGetMigMode(gpu1)
        pynvml.nvmlEventSetFree(s)
    finally:
        pynvml.nvmlShutdown()
        nvml_lib.fakeNvmlSetStateDir(None)


def test_ecc_events_and_counters(make_node):
    node = make_node()
    gpu = pynvml.nvmlDeviceGetHandleByIndex(0)
    xid_only, ecc = registered_set(gpu, mask=XID), registered_set(gpu, mask=SBE | DBE)

    def count(err: int, counter: int) -> int:
        total = pynvml.nvmlDeviceGetTotalEccErrors(gpu, err, counter)
        by_location = pynvml.nvmlDeviceGetMemoryErrorCounter(gpu, err, counter, pynvml.NVML_MEMORY_LOCATION_DEVICE_MEMORY)
        assert total == by_location
        return total

    C, U = pynvml.NVML_MEMORY_ERROR_TYPE_CORRECTED, pynvml.NVML_MEMORY_ERROR_TYPE_UNCORRECTED
    V, A = pynvml.NVML_VOLATILE_ECC, pynvml.NVML_AGGREGATE_ECC
    assert count(C, V) == count(U, V) == 0
    inject(node, 0, "ecc-single")
    inject(node, 0, "ecc-single")
    inject(node, 0, "ecc-double")
    got = [wait_rc(ecc, 2000)[1] for _ in range(3)]
    assert [(e.eventType, e.eventData, e.gpuInstanceId) for e in got] == [(SBE, 0, NO_INSTANCE)] * 2 + [(DBE, 0, NO_INSTANCE)]
    assert wait_rc(xid_only)[0] == pynvml.NVML_ERROR_TIMEOUT, "an Xid-only set got ECC events"
    assert (count(C, V), count(U, V), count(C, A), count(U, A)) == (2, 1, 2, 1)
    assert pynvml.nvmlDeviceGetMemoryErrorCounter(gpu, C, V, pynvml.NVML_MEMORY_LOCATION_L2_CACHE) == 0
    inject(node, 0, "heal")
    assert (count(C, V), count(U, V), count(C, A), count(U, A)) == (0, 0, 2, 1), "heal resets volatile counters only"
    assert health.health(node)[0] == health.GpuHealth(False, 0, 0, 2, 1)
    for s in (xid_only, ecc):
        pynvml.nvmlEventSetFree(s)


def test_lost_gpu_return_codes_and_heal(make_node):
    node = make_node([("h100-80gb", 2)])
    gpu0, gpu1 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(2))
    uuid0, uuid1 = pynvml.nvmlDeviceGetUUID(gpu0), pynvml.nvmlDeviceGetUUID(gpu1)
    watcher, bystander = registered_set(gpu0), registered_set(gpu1)
    inject(node, 0, "lost")
    assert wait_rc(watcher, 2000)[0] == pynvml.NVML_ERROR_GPU_IS_LOST
    assert wait_rc(watcher)[0] == pynvml.NVML_ERROR_TIMEOUT, "GPU_IS_LOST is delivered once per fault"
    assert wait_rc(bystander)[0] == pynvml.NVML_ERROR_TIMEOUT
    for call in (lambda: pynvml.nvmlDeviceGetUUID(gpu0), lambda: pynvml.nvmlDeviceGetMemoryInfo(gpu0),
                 lambda: pynvml.nvmlDeviceGetHandleByIndex(0), lambda: pynvml.nvmlDeviceGetHandleByUUID(uuid0),
                 lambda: pynvml.nvmlDeviceGetSupportedEventTypes(gpu0), lambda: pynvml.nvmlDeviceGetComputeMode(gpu0),
                 lambda: pynvml.nvmlDeviceGetTotalEccErrors(gpu0, 0, 0),
                 lambda: pynvml.nvmlDeviceGetHandleByUUID("GPU-00000000-0000-0000-0000-000000000000")):
        with pytest.raises(pynvml.NVMLError_GpuIsLost):
            call()
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByUUID(uuid1)) == uuid1, "a healthy GPU stays reachable"
    assert pynvml.nvmlDeviceGetCount() == 2
    inject(node, 0, "heal")
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetHandleByIndex(0)) == uuid0
    assert wait_rc(watcher)[0] == pynvml.NVML_ERROR_TIMEOUT, "heal is not an event"
    for s in (watcher, bystander):
        pynvml.nvmlEventSetFree(s)


def test_a_process_started_after_the_fault_sees_it(make_node, run_client):
    node = make_node()
    inject(node, 0, "lost")
    proc = run_client("""
        import pynvml
        pynvml.nvmlInit()
        try:
            pynvml.nvmlDeviceGetHandleByIndex(0)
        except pynvml.NVMLError_GpuIsLost:
            print("lost")
    """, node)
    assert proc.stdout.strip() == "lost"
