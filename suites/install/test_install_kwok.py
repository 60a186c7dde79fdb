"""`dra-testbed install` into a KWOK bed playing the user's cluster: fake nodes, their slices (written by the
chart's publisher config with the chart's per-node identity), a claim's pod scheduled by the real
kube-scheduler onto a fake node, a colliding install refused, and uninstall leaving the object list as it was.

A KWOK bed runs no pods: its KWOK controller manages every node (so it plays the chart's KWOK Deployment) and
the chart's publisher runs here as a host process, from the config the chart rendered into its ConfigMap."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

CLI = [sys.executable, "-m", "testbed.cli"]
pytestmark = pytest.mark.cluster
# "full": install into a live bed (over a minute); `nox -s tests` renders, lints and checks the chart (test_chart.py)
FULL_ENV = "DRA_TESTBED_INSTALL"

RELEASE = "hc"
KUBECTL_MINOR = "1.34"  # any kubectl of the toolchain speaks to every bed minor this suite runs


def _run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([*CLI, *args], capture_output=True, text=True)
    assert not check or out.returncode == 0, out.stderr
    return out


@pytest.fixture(scope="module")
def user_cluster(request) -> Iterator[Path]:
    """The user's cluster: a KWOK bed of the suite's life cycle (torn down also on failure or interrupt)."""
    from testbed.clusters.layout import from_flags

    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("installing into a live bed runs in `nox -s install` ($DRA_TESTBED_INSTALL=full)")  # allowed in suites/skips.yaml
    with request.getfixturevalue("bed")(from_flags(["bed-0=h100-80gb:1"]), label="helm-chart-install") as testbed:
        yield testbed.cluster.kubeconfig()


def _kubectl(kubeconfig: Path, *args: str) -> str:
    from testbed.toolchain.resolve import ensure

    kubectl = ensure(KUBECTL_MINOR, ["kubectl"], allow_download=False, allow_build=False).path("kubectl")
    return subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=True).stdout


def _objects(kubeconfig: Path) -> set[str]:
    """Every object of every listable resource but Events (the cluster's own log, not state)."""
    found = set()
    for resource in _kubectl(kubeconfig, "api-resources", "--verbs=list", "-o", "name").split():
        if resource.startswith("events"):
            continue
        found |= {f"{resource} {line}" for line in _kubectl(kubeconfig, "get", resource, "-A", "-o", "name").split()}
    return found


def test_install_publishes_schedules_and_uninstalls_cleanly(user_cluster: Path, tmp_path: Path) -> None:
    layout = tmp_path / "layout.yaml"
    layout.write_text("name: helm-demo\nnodes:\n- {name: fake-gpu, board: h100-80gb, count: 1, replicas: 2}\n")
    before = _objects(user_cluster)
    started = time.monotonic()
    _run("install", "--kubeconfig", str(user_cluster), "--layout", str(layout), "--release", RELEASE)
    print(f"install: {time.monotonic() - started:.1f} s")
    config = json.loads(_kubectl(user_cluster, "get", "cm", f"{RELEASE}-publisher", "-n", "dra-fake-gpus", "-o", "jsonpath={.data.config\\.json}"))
    config.update(kubeconfig=str(user_cluster), state_root=str(tmp_path / "state"), ready_file=str(tmp_path / "ready"), nvml_lib_dir=None)
    (tmp_path / "config.json").write_text(json.dumps(config))
    publisher = subprocess.Popen([sys.executable, "-m", "fake_gpus.machine.kwok_publisher", "--config", str(tmp_path / "config.json")])
    try:
        deadline = time.monotonic() + 60
        while not (tmp_path / "ready").exists():
            assert publisher.poll() is None and time.monotonic() < deadline, "the chart's publisher did not publish"
            time.sleep(0.2)
        slices = json.loads(_kubectl(user_cluster, "get", "resourceslices", "-o", "json"))["items"]
        by_node = {s["spec"]["nodeName"]: s for s in slices}
        assert {"bed-0", "fake-gpu-0", "fake-gpu-1"} <= by_node.keys()
        # the bed's own publisher and the chart's publish a node of the same hardware alike, names aside
        def normal(node: str, count: int) -> str:  # GPU UUIDs are each machine's own
            text = json.dumps(by_node[node]["spec"], sort_keys=True)
            return re.sub(r"GPU-[0-9a-f-]{36}", "GPU-UUID", text).replace(node, "NODE")
        assert normal("fake-gpu-0", 1) == normal("bed-0", 1)
        # a claim's pod: tolerates the fleet's taint, scheduled onto a fake node by the real scheduler
        manifest = tmp_path / "pod.yaml"
        manifest.write_text(POD)
        _kubectl(user_cluster, "apply", "-f", str(manifest))
        deadline = time.monotonic() + 30
        while not (node := _kubectl(user_cluster, "get", "pod", "hc-pod", "-o", "jsonpath={.spec.nodeName}")):
            assert time.monotonic() < deadline, "the claim's pod was not scheduled"
            time.sleep(0.5)
        assert node in {"fake-gpu-0", "fake-gpu-1"}
        _kubectl(user_cluster, "delete", "-f", str(manifest), "--wait")
        # another release of the same nodes, or onto the bed's own GPU node: refused with one line, exit 2
        again = _run("install", "--kubeconfig", str(user_cluster), "--layout", str(layout), "--release", "other", check=False)
        assert again.returncode == 2 and "release 'hc' already has a fake fleet" in again.stderr, again.stderr
    finally:
        publisher.terminate()
        publisher.wait(30)
    started = time.monotonic()
    _run("uninstall", "--kubeconfig", str(user_cluster), "--release", RELEASE)
    print(f"uninstall: {time.monotonic() - started:.1f} s")
    assert _objects(user_cluster) == before


def test_install_onto_a_node_a_driver_publishes_on_is_refused(user_cluster: Path, tmp_path: Path) -> None:
    layout = tmp_path / "layout.yaml"
    layout.write_text("name: clash\nnodes:\n- {name: bed-0, board: h100-80gb, count: 1}\n")
    before = _objects(user_cluster)
    out = _run("install", "--kubeconfig", str(user_cluster), "--layout", str(layout), "--release", "clash", check=False)
    assert out.returncode == 2 and "node bed-0 already has ResourceSlices of gpu.nvidia.com" in out.stderr, out.stderr
    assert len(out.stderr.strip().splitlines()) == 1
    assert _objects(user_cluster) == before


POD = """
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: hc-claim, namespace: default}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: gpu.nvidia.com, count: 1}
---
apiVersion: v1
kind: Pod
metadata: {name: hc-pod, namespace: default}
spec:
  nodeSelector: {dra-fake-gpus.io/release: hc}
  tolerations: [{key: dra-testbed.io/fake-node, operator: Exists, effect: NoSchedule}]
  resourceClaims: [{name: gpu, resourceClaimName: hc-claim}]
  containers: [{name: c, image: busybox, resources: {claims: [{name: gpu}]}}]
"""
