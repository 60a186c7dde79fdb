"""`dra-testbed install` into a kind bed playing the user's cluster, where the chart's Deployments run as pods:
its KWOK controller (our image of the kwok binary the toolchain builds) keeps the fake nodes Ready, its
publisher (the driver image) publishes their slices from inside the cluster, the real kube-scheduler puts a
claim's pod on a fake node, and uninstall leaves the object list as it was.

The bed has no GPU worker: its only node is the control plane (kind leaves a single node untainted), so
the only GPU nodes, and the only publisher of gpu.nvidia.com, are the chart's. Images are built offline and
loaded into the node, as the kind backend does with its own (testbed/clusters/kind/images/fleet_images.py)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Iterator

import pytest

from suites.install.cluster_objects import FULL_ENV, POD, RELEASE, kubectl, objects, run_cli

pytestmark = pytest.mark.cluster

NAMESPACE = "dra-fake-gpus"
LAYOUT = "name: helm-kind\nnodes:\n- {name: kind-fake-gpu, board: h100-80gb, count: 2, replicas: 2}\n"
FAKE_NODES = {"kind-fake-gpu-0", "kind-fake-gpu-1"}
SETTLE = 180.0  # pods start on a loaded two-core host: image unpack, Python imports, first list


@pytest.fixture(scope="module")
def kind_cluster(request) -> Iterator[tuple[Path, object]]:
    """A kind bed of no GPU worker with the chart's two images loaded into its node (torn down also on
    failure or interrupt); yields its kubeconfig and the images."""
    from testbed.clusters.kind.images.fleet_images import ensure_fleet_images
    from testbed.clusters.layout import Layout

    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("installing into a live bed runs in `nox -s install` ($DRA_TESTBED_INSTALL=full)")  # allowed in suites/skips.yaml
    minor = request.config.option.k8s
    images = ensure_fleet_images(minor)
    with request.getfixturevalue("bed")(Layout((), name="helm-kind"), label="kindinstall-helm", backend="kind",
                                         images=[images.publisher, images.kwok]) as testbed:
        yield testbed.cluster.kubeconfig(), images


def _wait(what: str, check, timeout: float = SETTLE):
    """`check()` until it returns something true; fails naming `what` after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while not (found := check()):
        assert time.monotonic() < deadline, f"{what} within {timeout:.0f} s"
        time.sleep(2)
    return found


def _ready_fake_nodes(kubeconfig: Path) -> set[str]:
    nodes = json.loads(kubectl(kubeconfig, "get", "nodes", "-l", f"dra-fake-gpus.io/release={RELEASE}", "-o", "json"))["items"]
    return {n["metadata"]["name"] for n in nodes
            if any(c["type"] == "Ready" and c["status"] == "True" for c in n["status"].get("conditions", []))}


def test_in_cluster_fleet_publishes_schedules_and_uninstalls_cleanly(kind_cluster, tmp_path: Path) -> None:
    kubeconfig, images = kind_cluster
    layout = tmp_path / "layout.yaml"
    layout.write_text(LAYOUT)
    before = objects(kubeconfig)
    started = time.monotonic()
    run_cli("install", "--kubeconfig", str(kubeconfig), "--layout", str(layout), "--release", RELEASE,
            "--image", images.publisher, "--kwok-image", images.kwok)
    print(f"install: {time.monotonic() - started:.1f} s")
    # the KWOK controller pod keeps the fake nodes Ready (no other KWOK runs in a kind bed)
    _wait("the chart's KWOK controller made the fake nodes Ready", lambda: _ready_fake_nodes(kubeconfig) == FAKE_NODES)
    print(f"fake nodes Ready: {time.monotonic() - started:.1f} s")

    def fake_slices() -> dict[str, dict]:
        slices = json.loads(kubectl(kubeconfig, "get", "resourceslices", "-o", "json"))["items"]
        return {s["spec"]["nodeName"]: s for s in slices if s["spec"].get("nodeName") in FAKE_NODES}
    published = _wait("the in-cluster publisher published the fake nodes' slices", lambda: (found := fake_slices()).keys() == FAKE_NODES and found)
    print(f"slices published: {time.monotonic() - started:.1f} s")
    assert all(len(s["spec"]["devices"]) == 2 for s in published.values()), "two GPUs per fake node"
    # the slices are the in-cluster publisher's: its pod runs on the kind node, and no process here publishes
    pods = json.loads(kubectl(kubeconfig, "get", "pods", "-n", NAMESPACE, "-o", "json"))["items"]
    running = {p["metadata"]["labels"]["app.kubernetes.io/component"]: p for p in pods if p["status"].get("phase") == "Running"}
    assert running.keys() == {"publisher", "kwok-controller"}, [(p["metadata"]["name"], p["status"].get("phase")) for p in pods]
    assert running["publisher"]["spec"]["containers"][0]["image"] == images.publisher
    assert running["kwok-controller"]["spec"]["nodeName"] not in FAKE_NODES
    # a claim's pod: tolerates the fleet's taint, scheduled onto a fake node by the real scheduler
    manifest = tmp_path / "pod.yaml"
    manifest.write_text(POD)
    kubectl(kubeconfig, "apply", "-f", str(manifest))
    node = _wait("the claim's pod was scheduled", lambda: kubectl(kubeconfig, "get", "pod", "hc-pod", "-o", "jsonpath={.spec.nodeName}"), 60)
    assert node in FAKE_NODES
    kubectl(kubeconfig, "delete", "-f", str(manifest), "--wait")
    started = time.monotonic()
    run_cli("uninstall", "--kubeconfig", str(kubeconfig), "--release", RELEASE)
    print(f"uninstall: {time.monotonic() - started:.1f} s")
    # kube-proxy's DaemonSet put a pod on each fake node: gone when uninstall returns, not a pod-GC period later
    bound = json.loads(kubectl(kubeconfig, "get", "pods", "-A", "-o", "json"))["items"]
    assert not [p["metadata"]["name"] for p in bound if p["spec"].get("nodeName") in FAKE_NODES]
    assert objects(kubeconfig) == before
