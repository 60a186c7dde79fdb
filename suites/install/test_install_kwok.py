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

from suites.install.cluster_objects import FULL_ENV, POD, RELEASE, kubectl as _kubectl, objects as _objects, run_cli as _run

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def user_cluster(request) -> Iterator[Path]:
    """The user's cluster: a KWOK bed of the suite's life cycle (torn down also on failure or interrupt)."""
    from testbed.clusters.layout import from_flags

    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("installing into a live bed runs in `nox -s install` ($DRA_TESTBED_INSTALL=full)")  # allowed in suites/skips.yaml
    with request.getfixturevalue("bed")(from_flags(["bed-0=h100-80gb:1"]), label="helm-chart-install") as testbed:
        yield testbed.cluster.kubeconfig()


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


def test_existing_backend_recognizes_the_installed_fleet(user_cluster: Path, tmp_path: Path) -> None:
    """The `existing` backend reads the layout of the fleet `install` made from its ConfigMap (what lets
    `conformance --kubeconfig` and the suites' --kubeconfig run with no layout file); none, or two fleets
    (a second release installed with helm directly), it says so in one line."""
    from testbed.clusters.existing import ExistingCluster, FleetLookupError, NoFleetInstalled
    from testbed.clusters.layout import load_layout
    from testbed.install.release import CHART, helm
    from testbed.install.values import DEFAULT_NAMESPACE, chart_values

    cluster = ExistingCluster(kubeconfig=user_cluster)
    with pytest.raises(NoFleetInstalled) as none:
        cluster.installed_layout()
    assert len(str(none.value).splitlines()) == 1 and "holds no fake GPU fleet" in str(none.value)
    assert cluster.layout_or_installed(None) is None  # real GPU nodes only: the checks read the nodes' labels
    layout = tmp_path / "layout.yaml"
    layout.write_text("name: recognized\nnodes:\n- {name: rec-a, board: h100-80gb, count: 2, replicas: 2}\n"
                      "- {name: rec-b, board: a100-80gb, count: 2, mode: 'static-mig:all-balanced', healthCheck: true}\n")
    _run("install", "--kubeconfig", str(user_cluster), "--layout", str(layout), "--release", RELEASE)
    try:
        assert cluster.installed_layout() == load_layout(layout)
        assert cluster.layout_or_installed(None) == load_layout(layout)
        # the suites' --kubeconfig with no --layout: the session's testbed carries the installed layout
        probe = tmp_path / "test_probe.py"
        probe.write_text("def test_layout(testbed):\n    print('NODES', ','.join(n.name for n in testbed.layout.nodes))\n")
        nested = subprocess.run([sys.executable, "-m", "pytest", str(probe), "-q", "-s", "-p", "no:cacheprovider", "-p", "testbed.pytest.plugin",
                                 "--kubeconfig", str(user_cluster)], capture_output=True, text=True, cwd=tmp_path, timeout=120)
        assert "NODES rec-a-0,rec-a-1,rec-b\n" in nested.stdout, nested.stdout[-1500:]
        other = tmp_path / "other.json"
        other.write_text(json.dumps(chart_values(load_layout(_other_layout(tmp_path)), device_classes=False)))
        helm(user_cluster, "install", "other", str(CHART), "--namespace", DEFAULT_NAMESPACE, "--values", str(other))
        try:
            with pytest.raises(FleetLookupError) as two:
                cluster.installed_layout()
            message = str(two.value)
            assert len(message.splitlines()) == 1 and "2 fake GPU fleets" in message and "'hc'" in message and "'other'" in message, message
        finally:
            _run("uninstall", "--kubeconfig", str(user_cluster), "--release", "other")
    finally:
        _run("uninstall", "--kubeconfig", str(user_cluster), "--release", RELEASE)


def _other_layout(folder: Path) -> Path:
    file = folder / "other.yaml"
    file.write_text("name: other\nnodes:\n- {name: other-0, board: l4-24gb, count: 1}\n")
    return file

