"""The stand-in kubelet's runtime of MPS control daemon pods (testbed/kubelet/mps_pods.py) on a pod our plugin's
Deployment would make (strategies.py), with the node's fake NVML local: the script runs with host paths, its
daemon is listed with the settings; a script that exits takes its daemon with it and is restarted after the
backoff; a deleted pod leaves no daemon. No cluster: the pod object is built from the Deployment's template."""

from __future__ import annotations

import copy
import json
import time
from pathlib import Path

from kubernetes.client import ApiClient

from fake_gpus.driver.kubeletplugin.strategies import MpsControl
from fake_gpus.nvml import state
from testbed.kubelet.mps_pods import MpsPods, runnable


def _pod(tmp_path: Path, uuid: str, settings: dict[str, str]):
    root = tmp_path / "plugin" / "mps"
    control = MpsControl(None, "n", "ns", root, root, nvml_state=tmp_path / "nvml")
    for d in control.dirs("x").values():
        d.mkdir(parents=True)
    template = control.deployment("x", [uuid], settings)["spec"]["template"]
    body = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", "namespace": "ns", "uid": "u1", **template["metadata"]},
            "spec": template["spec"]}
    return ApiClient().deserialize(json.dumps(body), "V1Pod", "application/json")


def _daemons(nvml: Path, want: int, bound: float = 30.0) -> list[state.MpsDaemonRecord]:
    deadline = time.monotonic() + bound
    while True:
        found = state.read_mps_daemons(nvml)
        if len(found) == want and all(d.pinned_mib is not None for d in found) or time.monotonic() > deadline:
            return found
        time.sleep(0.1)


def test_a_daemon_pod_runs_on_the_host_and_goes_with_its_pod(tmp_path: Path) -> None:
    (gpu, _) = state.create_state_dir(tmp_path / "nvml", [("h100-80gb", 2)])
    pod = _pod(tmp_path, gpu.uuid, {"MPS_ACTIVE_THREAD_PERCENTAGE": "30", f"MPS_PINNED_MEM_LIMIT_{gpu.uuid}": "1024M"})
    assert runnable(pod)
    stranger = copy.deepcopy(pod)
    stranger.metadata.labels = {"app": "web"}
    assert not runnable(stranger)  # the same container in a pod of no control daemon Deployment: never run on the host
    pods = MpsPods(lambda node: node == "n")
    try:
        pods.handle(pod)
        (daemon,) = _daemons(tmp_path / "nvml", 1)
        assert (daemon.gpu, daemon.active_thread_percentage, daemon.pinned_mib) == (0, 30, 1024)
        assert daemon.pipe_dir == str(tmp_path / "plugin" / "mps" / "x" / "pipe")
        pods.running["ns/p"].terminate()  # the script alone ends (its container exits): the daemon goes with it
        pods.running["ns/p"].wait()
        pods.handle(pod)
        assert state.read_mps_daemons(tmp_path / "nvml") == [] and "ns/p" not in pods.running  # restarted only after the backoff
        pods.backoff["ns/p"] = (0.0, pods.backoff["ns/p"][1])  # the backoff over
        pods.handle(pod)
        assert len(_daemons(tmp_path / "nvml", 1)) == 1
        pod.metadata.deletion_timestamp = "2026-01-01T00:00:00Z"
        pods.handle(pod)
        assert state.read_mps_daemons(tmp_path / "nvml") == [] and not pods.running
    finally:
        pods.stop_all()
    assert pods.bin_dir is None
