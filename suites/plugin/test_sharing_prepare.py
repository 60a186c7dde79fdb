"""Our kubelet plugin prepares shared and strategy-configured claims as NVIDIA's does (docs/design/sharing.md, "Prepare").

Claims carry opaque GpuConfig/MigDeviceConfig configs in their allocation and, with consumable shares, a
shareID per result; the plugin runs against a fake NVML, where the time slice and compute mode it sets are
read back through NVML; MPS control daemons are Deployments in the API server.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from conftest import DRIVER, NODE
from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId
from fake_gpus.nvml import state
from suites.nvidia.test_nvidia_prepare import _gpu_settings

pytestmark = pytest.mark.cluster

DEFAULT, EXCLUSIVE_PROCESS = 0, 3  # NVML compute modes
MIG_1G = "gpu-0-mig-1g10gb-19-3"


def gpu_config(strategy: str | None = None, kind: str = "GpuConfig", **sharing) -> dict:
    body = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": kind}
    if strategy is not None:
        body["sharing"] = {"strategy": strategy, **sharing}
    return body


def shared_claim(apiserver, devices: list[str], config: dict | None = None, share: bool = True) -> ClaimId:
    """A claim allocated `devices` (request `gpu`), each with a shareID when `share` (consumable capacity), its
    opaque config (if any) in the allocation as the scheduler copies it there."""
    resource = client.ResourceV1Api(apiserver.api)
    name = f"share-{uuid.uuid4().hex[:8]}"
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "count": len(devices)}}]}}}
    configs = [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": config}}] if config else []
    if configs:
        body["spec"]["devices"]["config"] = configs
    created = resource.create_namespaced_resource_claim(apiserver.namespace, body)
    results = [{"request": "gpu", "driver": DRIVER, "pool": NODE, "device": d,
                **({"shareID": str(uuid.uuid4()), "consumedCapacity": {"memory": "1Gi"}} if share else {})} for d in devices]
    selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
    allocation = {"devices": {"results": results, "config": [{"source": "FromClaim", **c} for c in configs]}, "nodeSelector": selector}
    resource.patch_namespaced_resource_claim_status(name, apiserver.namespace, {"status": {"allocation": allocation}})
    return ClaimId(apiserver.namespace, created.metadata.uid, name)


def gpu0(state_dir) -> str:
    return state.validate_state_dir(state_dir)[0][0].uuid


def prepared(k, claim: ClaimId) -> list:
    entry = k.prepare([claim]).claims[claim.uid]
    assert entry.error == "", entry.error
    return list(entry.devices)


def prepare_error(k, claim: ClaimId) -> str:
    return k.prepare([claim]).claims[claim.uid].error


def unprepared(k, claim: ClaimId) -> None:
    assert k.unprepare([claim]).claims[claim.uid].error == ""


@pytest.fixture
def plugin_with(start_plugin, apiserver):
    """plugin_with(state_dir, shares=None, faults=()) -> a running plugin with consumable shares as given."""

    def start(state_dir, shares: str | None = None, faults=(), mig: str = "dynamic"):
        args = ["--namespace", apiserver.namespace, "--consumable-shares", shares or "disabled"]
        return start_plugin(state_dir, faults=faults, mig=mig, args=args)

    return start


@pytest.mark.parametrize("fault", [None, "sharing-ignored"])
def test_time_slicing_sets_the_gpus_time_slice_and_unprepare_resets_it(plugin_with, state_dir, kubelet, apiserver, fault) -> None:
    k = kubelet(plugin_with(state_dir, faults=[fault] if fault else ()))
    gpu = gpu0(state_dir)
    claim = shared_claim(apiserver, ["gpu-0"], gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Long"}), share=False)
    assert _gpu_settings(state_dir, gpu) == (DEFAULT, 0)
    prepared(k, claim)
    if fault:  # the fault's prepare succeeds and sets nothing: this is how a suite must catch it
        assert _gpu_settings(state_dir, gpu) == (DEFAULT, 0)
        return
    assert _gpu_settings(state_dir, gpu) == (DEFAULT, 3)
    unprepared(k, claim)
    assert _gpu_settings(state_dir, gpu) == (DEFAULT, 0)


@pytest.mark.parametrize("config, message", [
    (gpu_config("Sliced"), "prepare devices failed: error validating GPU config: unknown GPU sharing strategy: Sliced, "
                           "supported GPU sharing strategies: TimeSlicing, MPS"),
    (gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Forever"}),
     "unknown time-slice interval: Forever, supported time-slice intervals: Default, Short, Medium, Long"),
    (gpu_config("MPS", mpsConfig={"defaultActiveThreadPercentage": 101}), "active thread percentage must not be greater than 100"),
    (gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Long", "period": 3}),
     'error getting opaque device configs: error decoding config parameters: strict decoding error: unknown field "sharing.timeSlicingConfig.period"'),
    (gpu_config("TimeSlicing", kind="MigDeviceConfig"), 'cannot apply MigDeviceConfig to device "gpu-0" of type "gpu" (request: gpu)'),
    (gpu_config("TimeSlicing", mpsConfig={}), "error getting timeslice config for requests '[gpu]' in claim"),
])
def test_an_invalid_config_fails_prepare_with_nvidias_message_and_changes_nothing(plugin_with, state_dir, kubelet, apiserver, config, message) -> None:
    plugin = plugin_with(state_dir)
    k = kubelet(plugin)
    claim = shared_claim(apiserver, ["gpu-0"], config, share=False)
    error = prepare_error(k, claim)
    assert message in error, error
    assert _gpu_settings(state_dir, gpu0(state_dir)) == (DEFAULT, 0)
    checkpoint = plugin.plugin_dir / "checkpoint.json"  # a config refused before any change leaves none written
    assert not checkpoint.exists() or claim.uid not in plugin.checkpoint["claims"]


def test_shared_gpu_keeps_its_time_slice_until_its_last_claim_unprepares_and_refuses_a_conflicting_config(
        plugin_with, state_dir, kubelet, apiserver) -> None:
    k = kubelet(plugin_with(state_dir, shares="memory"))
    gpu = gpu0(state_dir)
    long_slices = gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Long"})
    first, second = (shared_claim(apiserver, ["gpu-0"], long_slices) for _ in range(2))
    prepared(k, first)
    prepared(k, second)  # equal configs: NVIDIA's rule lets both hold the device
    other = shared_claim(apiserver, ["gpu-0"], gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Short"}))
    error = prepare_error(k, other)
    assert f"unable to prepare claim {other.uid}: requested device gpu-0 has conflicting configuration with already prepared claim" in error, error
    assert _gpu_settings(state_dir, gpu) == (DEFAULT, 3), "a refused claim must not change the shared GPU"
    unprepared(k, first)
    assert _gpu_settings(state_dir, gpu) == (DEFAULT, 3), "the time slice was reset under a claim still holding the GPU"
    unprepared(k, second)
    assert _gpu_settings(state_dir, gpu) == (DEFAULT, 0)


def test_shared_dynamic_mig_device_is_created_once_and_destroyed_with_its_last_claim(
        plugin_with, state_dir, kubelet, apiserver, mig_instances) -> None:
    k = kubelet(plugin_with(state_dir, shares="unlimited"))
    first, second = (shared_claim(apiserver, [MIG_1G]) for _ in range(2))
    (a,) = prepared(k, first)
    (b,) = prepared(k, second)
    assert a.device_name == b.device_name == MIG_1G
    one = [{"minor": 0, "profile": "1g.10gb", "start": 3, "size": 1, "compute_instances": 1}]
    assert mig_instances(state_dir) == one
    unprepared(k, first)
    assert mig_instances(state_dir) == one, "the instance went while a claim still held it"
    unprepared(k, second)
    assert mig_instances(state_dir) == []


def test_mps_runs_a_control_daemon_per_claim_and_unprepare_removes_it(plugin_with, state_dir, kubelet, apiserver) -> None:
    plugin = plugin_with(state_dir)
    k = kubelet(plugin)
    gpu = gpu0(state_dir)
    claim = shared_claim(apiserver, ["gpu-0"], gpu_config("MPS", mpsConfig={"defaultActiveThreadPercentage": 50}), share=False)
    (device,) = prepared(k, claim)
    apps = client.AppsV1Api(apiserver.api)
    (deployment,) = [d for d in apps.list_namespaced_deployment(apiserver.namespace).items
                     if d.metadata.name.startswith(f"mps-control-daemon-{claim.uid}-")]
    assert len(deployment.metadata.name) == len(f"mps-control-daemon-{claim.uid}-") + 5
    assert deployment.spec.template.spec.node_name == NODE
    assert _gpu_settings(state_dir, gpu)[0] == EXCLUSIVE_PROCESS
    (spec_path,) = plugin.cdi_dir.glob("*.json")
    (cdi_device,) = json.loads(spec_path.read_text())["devices"]
    edits = cdi_device["containerEdits"]
    assert "CUDA_MPS_PIPE_DIRECTORY=/tmp/nvidia-mps" in edits["env"]
    mounted = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
    assert mounted["/tmp/nvidia-mps"].endswith("/pipe") and mounted["/dev/shm"].endswith("/shm")
    assert all(Path(mounted[p]).is_dir() for p in ("/tmp/nvidia-mps", "/dev/shm"))
    unprepared(k, claim)
    # deleted in the foreground, as NVIDIA's: the object may linger, marked, until its pod is gone
    assert not [d for d in apps.list_namespaced_deployment(apiserver.namespace).items
                if claim.uid in d.metadata.name and d.metadata.deletion_timestamp is None]
    assert _gpu_settings(state_dir, gpu)[0] == DEFAULT
    assert not Path(mounted["/tmp/nvidia-mps"]).exists()


def test_mps_is_refused_under_consumable_shares_with_nvidias_message(plugin_with, state_dir, kubelet, apiserver) -> None:
    k = kubelet(plugin_with(state_dir, shares="4"))
    claim = shared_claim(apiserver, ["gpu-0"], gpu_config("MPS"))
    error = prepare_error(k, claim)
    assert "prepare devices failed: error applying config: MPS sharing is not supported when consumable shares is enabled" in error, error
    assert _gpu_settings(state_dir, gpu0(state_dir)) == (DEFAULT, 0)
