"""NVIDIA's own DRA driver on kind: real kubelets prepare its claims on our fake H100s and containerd runs the pods.

The plugin runs as NVIDIA's chart deploys it (`dra-testbed up --backend kind --driver nvidia`). Each pod
gets NVIDIA's CDI devices, unmodified, and its container sees through NVML (nvidia-ml-py) and `nvidia-smi -L`
exactly its allocation: the fake libnvidia-ml shows the GPUs and MIG devices whose device nodes the container was
given. Deleting the pod unprepares the claim and a dynamic MIG instance is gone with it, also when the
plugin restarted in between. Last, NVIDIA's quickstart pods (a plain image whose command is `nvidia-smi -L`)
run unchanged with NVIDIA's driver and then, redeployed on the same cluster, with ours: both CDI specs
mount the driver root's nvidia-smi and libnvidia-ml.
"""

from __future__ import annotations

import json
import threading
import time
from contextlib import contextmanager
from typing import Iterator

import pytest

from fake_gpus.driver.identity import parse_device_name
from fake_gpus.nvml.state import validate_state_dir
from suites.kind_bed import KindBed
from suites.nvidia.conftest import required_plugin
from suites.kind.pods import (H100, allocated_device, claim_template, delete_pod, gpu_instances, gpu_pod, placement_of, run_pod,
                              scratch_namespace)
from testbed.kube.waiting import wait_for
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec
from testbed.drivers.nvidia.kind import NAME as CHART, NVIDIA_NAMESPACE
from testbed.clusters.layout import from_flags
from testbed.drivers.nvidia.classes import DRIVER

pytestmark = [pytest.mark.kind, pytest.mark.slow]

NODE = "nv-mig"
LAYOUT = [f"{NODE}=h100-80gb:2:dynamic-mig"]  # one worker: whole GPUs and dynamic MIG on one node keep kind runs few
PROFILES = {"1g.10gb": 19, "3g.40gb": 9}  # H100 80GB profile ids (nvidia-smi mig -lgip)


@pytest.mark.parametrize("command", ["up", "conformance"])
def test_an_image_not_in_the_engine_is_refused_before_a_cluster_is_made(command, tmp_path) -> None:
    """`--driver nvidia --driver-image IMAGE` on kind: an image the local engine lacks is bad input (one
    line, exit 2) found before any node container exists, for `up` and for `conformance` alike."""
    import sys

    from hostenv.processes import run_child
    from testbed.clusters.registry import cluster_for

    name = "nvkind-absent"
    args = {"up": ["up", "--node", "x=h100-80gb:1"], "conformance": ["conformance", "--report", str(tmp_path / "r")]}[command]
    run = run_child([sys.executable, "-m", "testbed.cli", *args, "--backend", "kind", "--name", name, "--driver", "nvidia",
                     "--driver-image", "dra-testbed/absent-plugin:0"], capture_output=True, text=True, timeout=600)
    errors = [line for line in run.stderr.splitlines() if line.startswith("dra-testbed: error: ")]
    assert run.returncode == 2 and len(errors) == 1, run.stderr  # progress lines (the engine starting) may come before it
    assert "image 'dra-testbed/absent-plugin:0' is not in the local Docker engine" in errors[0], run.stderr
    assert not cluster_for("kind", name).exists() and not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def nvidia_kind(bed, request) -> Iterator[KindBed]:
    """A kind cluster of its own (never the shared suite's name) running NVIDIA's plugin (found by its lookup)."""
    from testbed.clusters.kind.images.driver_image import ensure_workload_image

    binary = required_plugin(request.config)
    try:
        with bed(from_flags(LAYOUT), DriverSpec("nvidia", DRIVER, path=str(binary)), label="nvkind-e2e", backend="kind",
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


def _smi_list(bed: KindBed, namespace: str, pod: str) -> list[str] | str:
    """`nvidia-smi -L` in the pod's container (the nvidia-smi NVIDIA's CDI spec mounts from the driver root):
    its lines, or what went wrong (asserted by the caller once the pod is cleaned up)."""
    out = bed.cluster.kubectl("-n", namespace, "exec", pod, "--", "nvidia-smi", "-L", check=False)
    if out.returncode != 0:
        return f"nvidia-smi -L in {pod} failed ({out.returncode}): {(out.stderr or out.stdout).strip()[-300:]}"
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


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
    listed = _smi_list(nvidia_kind, namespace, "whole")
    delete_pod(nvidia_kind, namespace, "whole", NODE)
    assert isinstance(listed, list) and len(listed) == 1 and mine.uuid in listed[0], listed


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
    listed = _smi_list(nvidia_kind, namespace, name)
    delete_pod(nvidia_kind, namespace, name, NODE)
    assert gpu_instances(nvidia_kind, NODE) == [], "unprepare left the MIG instance behind"
    assert _caps_files(nvidia_kind) == "[]", f"capability files left behind: {_caps_files(nvidia_kind)}"
    assert isinstance(listed, list) and len(listed) == 2, listed
    assert parent.uuid in listed[0] and instance.uuid in listed[1] and profile in listed[1], listed


def _caps_files(bed: KindBed) -> str:
    return json.dumps(sorted(p.name for p in (bed.state_dir(NODE) / "proc/driver/nvidia/capabilities").rglob("gi*")))


def _restart_plugin(bed: KindBed) -> None:
    """Delete the worker's NVIDIA plugin pod and wait until its DaemonSet's new pod is ready."""
    selector = f"{CHART}-component=kubelet-plugin-dynamic-mig"
    worker = bed.worker(NODE)
    (old,) = [p.metadata.name for p in bed.core.list_namespaced_pod(NVIDIA_NAMESPACE, label_selector=selector).items
              if p.spec.node_name == worker]
    bed.core.delete_namespaced_pod(old, NVIDIA_NAMESPACE)
    wait_for(bed.core.list_namespaced_pod,
             lambda p: p.metadata.name != old and p.spec.node_name == worker and p.status.phase == "Running"
             and all(c.ready for c in p.status.container_statuses or []),
             namespace=NVIDIA_NAMESPACE, label_selector=selector, what="the restarted NVIDIA plugin to be ready", timeout=240)


def test_plugin_restart_between_prepare_and_unprepare_leaks_nothing(nvidia_kind, namespace) -> None:
    """The kubelet prepared a dynamic 1g.10gb through one plugin pod and unprepares it through the next:
    NVIDIA's checkpoint carries the claim over, and the instance and its capability files still go."""
    _run(nvidia_kind, namespace, "restart", "mig.nvidia.com", f"device.attributes['{DRIVER}'].profile == '1g.10gb'")
    assert len(gpu_instances(nvidia_kind, NODE)) == 1
    _restart_plugin(nvidia_kind)
    assert len(gpu_instances(nvidia_kind, NODE)) == 1, "a plugin restart dropped the prepared instance"
    delete_pod(nvidia_kind, namespace, "restart", NODE)
    assert gpu_instances(nvidia_kind, NODE) == [], "unprepare after a plugin restart left the MIG instance behind"
    assert _caps_files(nvidia_kind) == "[]", f"capability files left behind: {_caps_files(nvidia_kind)}"


@contextmanager
def _allocations(bed: KindBed, namespace: str) -> Iterator[dict[str, str]]:
    """Claim name -> allocated device of the namespace's claims, as seen by polling from now on: a template's
    claim goes with its finished pod, often before a test could read it (it lives for seconds at least: the
    container has to start, run and stop in between)."""
    seen: dict[str, str] = {}
    done = threading.Event()

    def follow() -> None:
        while not done.wait(0.2):
            for claim in bed.resource.list_namespaced_resource_claim(namespace).items:
                if claim.status and claim.status.allocation:
                    seen[claim.metadata.name] = claim.status.allocation.devices.results[0].device

    thread = threading.Thread(target=follow, daemon=True)
    thread.start()
    try:
        yield seen
    finally:
        done.set()
        thread.join(timeout=30)


def _quickstart(bed: KindBed, namespace: str, name: str, device_class: str, image: str) -> tuple[str, list[str]]:
    """NVIDIA's quickstart pod as its docs write it: a ResourceClaimTemplate of `device_class` with no
    selector, a plain image (no NVML, no nvidia-smi of its own) whose command is `nvidia-smi -L`. The
    device allocated to it and its log lines once it succeeded; the pod is then deleted and unprepared."""
    bed.resource.create_namespaced_resource_claim_template(namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": device_class}}]}}}})
    with _allocations(bed, namespace) as allocated:
        bed.core.create_namespaced_pod(namespace, {
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"restartPolicy": "Never", "nodeSelector": {"dra-testbed.io/layout-node": NODE},
                     "containers": [{"name": "ctr", "image": image, "imagePullPolicy": "Never", "command": ["nvidia-smi", "-L"],
                                     "resources": {"claims": [{"name": "gpu"}]}}],
                     "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}]}})
        pod = wait_for(bed.core.list_namespaced_pod, lambda p: p.status.phase in ("Succeeded", "Failed"), name=name,
                       namespace=namespace, what=f"quickstart pod {name} to finish", timeout=240)
        log = bed.core.read_namespaced_pod_log(name, namespace)
        devices = [device for claim, device in allocated.items() if claim.startswith(f"{name}-")]
    bed.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)  # its claim is unprepared and gone already
    assert pod.status.phase == "Succeeded", f"{name}: {pod.status.phase}, log: {log[-300:]}"
    assert len(devices) == 1, f"{name}: allocations seen {allocated}"
    return devices[0], [line.strip() for line in log.splitlines() if line.strip()]


@pytest.mark.parametrize("driver", ["nvidia", "ours"])  # in this order: ours is deployed over NVIDIA's, retiring it
def test_quickstart_nvidia_smi_pods_list_exactly_their_device(nvidia_kind, namespace, driver) -> None:
    """A whole GPU (class gpu.nvidia.com) and a MIG device (mig.nvidia.com): the pod's `nvidia-smi -L` lists
    exactly the allocated GPU, or its parent GPU with one MIG device of the allocated profile (the node
    holds no other instance meanwhile)."""
    from testbed.clusters.kind.images.node_image import ensure_base_image

    if driver == "ours":
        nvidia_kind.cluster.deploy_driver(DriverSpec("ours", DRIVER))
        assert nvidia_kind.core.list_namespaced_pod(NVIDIA_NAMESPACE).items == [], "NVIDIA's plugin still runs beside ours"
    plain = ensure_base_image()
    nvidia_kind.cluster.load_images(plain, workers_only=True)
    gpus = {g.minor: g.uuid for g in validate_state_dir(nvidia_kind.state_dir(NODE))[0]}

    device, lines = _quickstart(nvidia_kind, namespace, "quick-gpu", "gpu.nvidia.com", plain)
    assert len(lines) == 1 and lines[0].startswith("GPU ") and f"(UUID: {gpus[parse_device_name(device).minor]})" in lines[0], (device, lines)

    device, lines = _quickstart(nvidia_kind, namespace, "quick-mig", "mig.nvidia.com", plain)
    ref = parse_device_name(device)
    profile = H100.profile_by_id(ref.profile_id).name
    assert len(lines) == 2 and f"(UUID: {gpus[ref.minor]})" in lines[0], (device, lines)
    assert lines[1].startswith(f"MIG {profile} ") and "(UUID: MIG-" in lines[1], (device, lines)
    deadline = time.monotonic() + 60  # the kubelet unprepares once the container stopped
    while gpu_instances(nvidia_kind, NODE) and time.monotonic() < deadline:
        time.sleep(1)
    assert gpu_instances(nvidia_kind, NODE) == [], "the quickstart MIG instance outlived its pod"
