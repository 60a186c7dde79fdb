"""GPUs that fail on kind: real kubelets, each driver's own DaemonSet, faults injected into a worker's fake NVML.

A worker whose mode ends `:health` runs our publisher's health monitor, or NVIDIA's plugin in a DaemonSet of its
own with NVMLDeviceHealthCheck (testbed/drivers/nvidia/kind.py). Xid 79 on GPU 0 taints that GPU's device
`gpu.nvidia.com/xid=79:NoSchedule` with both drivers; `gpu heal` lifts it with ours (the GPU's recovery action
is back to none) and not with NVIDIA's, which never lifts a taint (docs/design/health.md).

A kind bed per driver (minutes each): `nox -s health` ($DRA_TESTBED_NVIDIA_HEALTH=full).
"""

from __future__ import annotations

import os
import sys
import time
from typing import Iterator

import pytest

from hostenv.processes import run_child
from suites.kind_bed import KindBed
from suites.nvidia.conftest import required_plugin
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import from_flags
from testbed.drivers.nvidia.classes import DRIVER as NVIDIA_DRIVER

pytestmark = [pytest.mark.kind, pytest.mark.slow]

FULL_ENV = "DRA_TESTBED_NVIDIA_HEALTH"
NODE = "sick"
XID_TAINT = ("gpu.nvidia.com/xid", "79", "NoSchedule")
BOUND_S = 30.0


@pytest.fixture(scope="module", params=["ours", "nvidia"])
def health_kind(bed, request) -> Iterator[tuple[str, KindBed]]:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("failing GPUs on kind (a kind bed per driver) run in `nox -s health` ($DRA_TESTBED_NVIDIA_HEALTH=full)")  # allowed in suites/skips.yaml
    driver = DriverSpec("nvidia", NVIDIA_DRIVER, path=str(required_plugin(request.config))) if request.param == "nvidia" else DriverSpec()
    try:
        with bed(from_flags([f"{NODE}=h100-80gb:2:whole:health"]), driver, label=f"health-kind-{request.param}", backend="kind",
                 workers_only=True, attempts=2, on_failure_logs=True) as tb:
            failed = request.session.testsfailed
            yield request.param, KindBed(tb.cluster, tb.api, "")
            if request.session.testsfailed > failed:
                tb.handle.failed = True
    except ClusterError as exc:
        pytest.fail(f"kind bed with failing GPUs ({request.param}): {exc}", pytrace=False)


def _gpu(bed: KindBed, *args: str) -> None:
    run = run_child([sys.executable, "-m", "testbed.cli", "gpu", *args, "--name", bed.cluster.name, "--backend", "kind"],
                    capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr


def _taints(bed: KindBed, device: str) -> list[tuple[str, str | None, str]]:
    for s in bed.resource.list_resource_slice(field_selector=f"spec.nodeName={bed.worker(NODE)}").items:
        for d in s.spec.devices or []:
            if d.name == device:
                return [(t.key, t.value, t.effect) for t in d.taints or []]
    return []


def _until(what: str, check, bound: float = BOUND_S) -> float:
    started = time.monotonic()
    while not check():
        assert time.monotonic() - started < bound, f"{what} within {bound:.0f}s"
        time.sleep(0.5)
    return time.monotonic() - started


def test_a_fatal_xid_taints_its_gpu_and_only_ours_lifts_it_on_heal(health_kind, record_property) -> None:
    driver, bed = health_kind
    _until("the worker's slices published", lambda: bool(bed.resource.list_resource_slice(
        field_selector=f"spec.nodeName={bed.worker(NODE)}").items))
    assert _taints(bed, "gpu-0") == [] and _taints(bed, "gpu-1") == []
    _gpu(bed, "fail", NODE, "0", "--xid", "79")
    record_property("xid_to_taint_s", round(_until("the Xid's taint on gpu-0", lambda: XID_TAINT in _taints(bed, "gpu-0")), 2))
    assert _taints(bed, "gpu-1") == [], "an Xid of GPU 0 tainted GPU 1"
    _gpu(bed, "heal", NODE, "0")
    if driver == "ours":  # beyond NVIDIA's: a reset GPU takes claims again
        record_property("heal_to_untainted_s", round(_until("the taint lifted after heal", lambda: _taints(bed, "gpu-0") == []), 2))
    else:  # NVIDIA's driver keeps it until its plugin restarts
        time.sleep(5)
        assert XID_TAINT in _taints(bed, "gpu-0"), "NVIDIA's driver lifted a taint on heal, which its source never does"
