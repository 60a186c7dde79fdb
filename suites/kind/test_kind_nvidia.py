"""NVIDIA's own DRA driver on kind: real kubelets prepare its claims on our fake H100s and containerd runs the pods.

The plugin runs as NVIDIA's chart deploys it (`dra-testbed up --backend kind --driver nvidia`). Each pod
gets NVIDIA's CDI devices, unmodified, and its container sees through NVML (nvidia-ml-py) exactly its
allocation: the fake libnvidia-ml shows the GPUs and MIG devices whose device nodes the container was
given. Deleting the pod unprepares the claim and a dynamic MIG instance is gone with it.
"""

from __future__ import annotations

import json
from typing import Iterator

import pytest

from fake_gpus.driver.identity import parse_device_name
from fake_gpus.nvml.state import validate_state_dir
from suites.kind.conftest import KindBed
from suites.kind.pods import (H100, allocated_device, claim_template, delete_pod, gpu_instances, gpu_pod, placement_of, run_pod,
                              scratch_namespace)
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import from_flags
from testbed.nvidia.binary import PluginNotFound, plugin_binary
from testbed.nvidia.classes import DRIVER

pytestmark = [pytest.mark.kind, pytest.mark.slow]

NODE = "nv-mig"
LAYOUT = [f"{NODE}=h100-80gb:2:dynamic-mig"]  # one worker: whole GPUs and dynamic MIG on one node keep kind runs few
PROFILES = {"1g.10gb": 19, "3g.40gb": 9}  # H100 80GB profile ids (nvidia-smi mig -lgip)


@pytest.fixture(scope="module")
def nvidia_kind(bed, request) -> Iterator[KindBed]:
    """A kind cluster of its own (never the shared suite's name) running NVIDIA's plugin from $DRA_TESTBED_NVIDIA_PLUGIN."""
    from testbed.clusters.kind.driver_image import ensure_workload_image

    try:
        binary = plugin_binary()
    except PluginNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    try:
        with bed(from_flags(LAYOUT), DriverSpec("binary", DRIVER, path=str(binary)), label="nvkind-e2e", backend="kind",
                 attempts=2) as tb:  # a loaded machine has been seen to time kind out waiting for systemd
            workload = ensure_workload_image()
            tb.cluster.load_images(workload, workers_only=True)
            failed = request.session.testsfailed
            yield KindBed(tb.cluster, tb.api, workload)
            if request.session.testsfailed > failed:
                tb.cluster.export_logs()
    except ClusterError as exc:
        pytest.fail(f"kind test bed with NVIDIA's driver: {exc}", pytrace=False)


@pytest.fixture
def namespace(nvidia_kind):
    yield from scratch_namespace(nvidia_kind, "nv")


def _run(bed: KindBed, namespace: str, name: str, device_class: str, cel: str) -> dict:
    bed.resource.create_namespaced_resource_claim_template(namespace, claim_template(name, device_class, cel))
    seen = run_pod(bed, namespace, gpu_pod(name, bed.workload_image, NODE, name))
    assert "error" not in seen, seen
    assert seen["env"].get("NVIDIA_VISIBLE_DEVICES") == "void", "NVIDIA's CDI spec sets it; the view must come from device nodes"
    return seen


def test_whole_gpu_claim_sees_exactly_that_gpu(nvidia_kind, namespace) -> None:
    seen = _run(nvidia_kind, namespace, "whole", "gpu.nvidia.com", f"device.attributes['{DRIVER}'].productName == '{H100.product_name}'")
    minor = parse_device_name(allocated_device(nvidia_kind, namespace, "whole")).minor
    gpus, _ = validate_state_dir(nvidia_kind.state_dir(NODE))
    (mine,) = [g for g in gpus if g.minor == minor]
    assert [(d["uuid"], d["mig_devices"]) for d in seen["devices"]] == [(mine.uuid, [])], seen
    assert seen["devices"][0]["memory_total"] == H100.memory_mib * 2**20
    delete_pod(nvidia_kind, namespace, "whole", NODE)


@pytest.mark.parametrize("profile", list(PROFILES))
def test_dynamic_mig_claim_sees_exactly_its_instance_which_goes_with_the_pod(nvidia_kind, namespace, profile) -> None:
    name = f"mig-{profile.replace('.', '')}"
    seen = _run(nvidia_kind, namespace, name, "mig.nvidia.com", f"device.attributes['{DRIVER}'].profile == '{profile}'")
    device = allocated_device(nvidia_kind, namespace, name)
    start, size = placement_of(device)
    assert gpu_instances(nvidia_kind, NODE) == [(PROFILES[profile], start, size)]
    gpus, mig = validate_state_dir(nvidia_kind.state_dir(NODE))
    parent = next(g for g in gpus if g.minor == parse_device_name(device).minor)
    (instance,) = mig.compute_instances
    assert [(d["uuid"], [m["uuid"] for m in d["mig_devices"]]) for d in seen["devices"]] == [(parent.uuid, [instance.uuid])], seen
    memory = H100.profile_by_id(PROFILES[profile]).memory_mib
    assert seen["devices"][0]["mig_devices"][0]["memory_total"] == memory * 2**20
    delete_pod(nvidia_kind, namespace, name, NODE)
    assert gpu_instances(nvidia_kind, NODE) == [], "unprepare left the MIG instance behind"
    files = json.dumps(sorted(p.name for p in (nvidia_kind.state_dir(NODE) / "proc/driver/nvidia/capabilities").rglob("gi*")))
    assert files == "[]", f"capability files left behind: {files}"
