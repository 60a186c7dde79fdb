"""An MPS claim's control daemon on the node, judged physically: our plugin prepares a GpuConfig MPS claim, its
Deployment's pod is run by the bed's stand-in kubelet, which serves the node (testbed/kubelet/mps_pods.py: the
container's script on the host, with the stand-in nvidia-cuda-mps-control), and the physical judge (testbed/workloads/physical.py)
reads the node's fake NVML: one daemon holding the claim's thread percentage and pinned limit while prepared, none
after unprepare. Each fault of fake_gpus/driver/faults.py that breaks one of these is caught: those cases (about
20 and 40 s) run in `nox -s sharing` ($DRA_TESTBED_MPS_FAULTS=full); `nox -s tests` runs the clean one."""

from __future__ import annotations

import os
import time
from typing import Callable

import pytest
from kubernetes import client

from conftest import DRIVER, NODE
from fake_gpus.driver.kubeletplugin.strategies import mps_daemon_name
from suites.plugin.test_sharing_prepare import gpu_config, plugin_with, prepared, shared_claim, unprepared  # noqa: F401 - plugin_with: fixture
from testbed.workloads.devices import DeviceId
from testbed.workloads.oracle import Result
from testbed.workloads.physical import HeldClaim, judge_node
from testbed.workloads.physical_watch import read_nvml

pytestmark = pytest.mark.cluster

MPS = {"defaultActiveThreadPercentage": 50, "defaultPinnedDeviceMemoryLimit": "2Gi"}
BOUND = 45.0  # seconds for a daemon to start (three Python starts on a loaded machine) or to go
FULL_ENV = "DRA_TESTBED_MPS_FAULTS"  # "full": the fault cases too (nox -s sharing)
GONE = 15.0  # seconds for a deleted pod's daemon to go: its stand-in kubelet sees the deletion within a watch round


def _config() -> list[dict]:
    return [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": gpu_config("MPS", mpsConfig=MPS)}}]


def _judged(state_dir, held: list[HeldClaim], bound: float, settled: Callable[[], bool] = lambda: False) -> list:
    """The judge's violations once they are none, or once the node has `settled`, or at `bound` seconds."""
    deadline = time.monotonic() + bound
    while True:
        done = settled()  # before the look: what is judged is what the node held once settled
        problems = judge_node(NODE, "whole", read_nvml(state_dir), held, {}, DRIVER)
        if not problems or done or time.monotonic() > deadline:
            return problems
        time.sleep(0.5)


@pytest.mark.parametrize("fault", [None, "mps-limits-ignored", "mps-daemon-left-behind"], ids=lambda f: f or "clean")
def test_mps_claim_has_one_daemon_with_its_limits_and_none_after_unprepare(fault, plugin_with, state_dir, kubelet, apiserver) -> None:  # noqa: F811
    if fault and os.environ.get(FULL_ENV) != "full":
        pytest.skip(f"the MPS fault cases run in `nox -s sharing` (${FULL_ENV}=full)")  # allowed in suites/skips.yaml
    plugin = plugin_with(state_dir, faults=[fault] if fault else ())
    k = kubelet(plugin)
    # the daemon's script writes its startup file after handing the daemon every setting (the startup probe's file)
    started = lambda: any(plugin.plugin_dir.glob("mps/*/log/startup.log"))  # noqa: E731
    claim = shared_claim(apiserver, ["gpu-0"], gpu_config("MPS", mpsConfig=MPS), share=False)
    results = [Result("gpu", DeviceId(DRIVER, NODE, "gpu-0"))]
    try:
        prepared(k, claim)
        while_prepared = _judged(state_dir, [HeldClaim(claim.name, results, _config(), True)], BOUND, started)
        daemons = read_nvml(state_dir).mps
        unprepared(k, claim)
        after = _judged(state_dir, [HeldClaim(claim.name, results, _config(), False)], GONE)
        after_daemons = read_nvml(state_dir).mps
    finally:
        apps = client.AppsV1Api(apiserver.api)
        for d in apps.list_namespaced_deployment(apiserver.namespace).items:
            if d.metadata.name.startswith(mps_daemon_name(claim.uid)):
                apps.delete_namespaced_deployment(d.metadata.name, apiserver.namespace)
    print(f"{fault or 'clean'}: prepared {daemons} -> {while_prepared}; unprepared {after_daemons} -> {after}")
    if fault == "mps-limits-ignored":
        assert len(while_prepared) == 1 and "asks for one holding (50, 2048)" in while_prepared[0].message, while_prepared
        assert [(d.active_thread_percentage, d.pinned_mib) for d in daemons[0]] == [(None, None)]
    else:
        assert while_prepared == [] and [(d.active_thread_percentage, d.pinned_mib) for d in daemons[0]] == [(50, 2048)]
    if fault == "mps-daemon-left-behind":
        assert len(after) == 1 and "no prepared claim asks MPS of it" in after[0].message, after
    else:
        assert after == [] and after_daemons == {}
