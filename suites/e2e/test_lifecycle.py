"""`up`, `down`, `status` and bad input, through the real CLI and real components."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hostenv.processes import alive, run_child
from testbed.clusters.layout import NODE_KEYS
from testbed.clusters.kwok import KwokCluster

pytestmark = pytest.mark.cluster

H100_NODE = "gpu-0=h100-80gb:2:whole"


def cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return run_child([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True,
                     env={**os.environ, **(env or {})}, timeout=300)


def listening(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


@pytest.fixture
def cluster_name() -> str:
    name = f"lc-{uuid.uuid4().hex[:8]}"
    yield name
    KwokCluster(name).delete()  # teardown even when an assertion failed half-way


def assert_nothing_left(cluster: KwokCluster, pids: dict[str, int], ports: list[int]) -> None:
    assert not cluster.home.exists(), f"{cluster.home} left behind"
    assert not cluster.kwok_dir.exists(), f"{cluster.kwok_dir} left behind"
    assert [name for name, pid in pids.items() if alive(pid)] == []
    assert [port for port in ports if listening(port)] == []


def test_up_prints_kubeconfig_last_and_down_leaves_nothing(cluster_name: str) -> None:
    up = cli("up", "--name", cluster_name, "--node", H100_NODE)
    assert up.returncode == 0, up.stderr
    kubeconfig = Path(up.stdout.strip().splitlines()[-1])
    assert kubeconfig.is_file()
    assert cli("kubeconfig", "--name", cluster_name).stdout.strip() == str(kubeconfig)
    status = cli("status", "--name", cluster_name)
    assert status.returncode == 0 and "running" in status.stdout and "1 nodes" in status.stdout
    cluster = KwokCluster(cluster_name)
    pids, ports = cluster.pids(), cluster.ports()
    assert set(pids) >= {"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller"}
    assert ports and all(listening(p) for p in ports[:1])
    down = cli("down", "--name", cluster_name)
    assert down.returncode == 0, down.stderr
    assert_nothing_left(cluster, pids, ports)
    assert cli("status", "--name", cluster_name).returncode == 1


def test_failed_up_leaves_nothing(cluster_name: str) -> None:
    # an invalid driver name passes our checks but the apiserver rejects the slices: up fails mid-way
    up = cli("up", "--name", cluster_name, "--node", H100_NODE, env={"DRA_TESTBED_DRIVER_NAME": "Not_A_Domain"})
    assert up.returncode != 0
    assert "removing the partial cluster" in up.stderr
    cluster = KwokCluster(cluster_name)
    assert_nothing_left(cluster, {}, [])
    assert not [line for line in subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout.splitlines()
                if f"clusters/{cluster_name}/" in line]


def test_name_in_use_is_refused_and_force_replaces_it(cluster_name: str) -> None:
    assert cli("up", "--name", cluster_name, "--node", H100_NODE).returncode == 0
    first_pid = KwokCluster(cluster_name).pids()["kube-apiserver"]
    again = cli("up", "--name", cluster_name, "--node", H100_NODE)
    assert again.returncode == 1
    assert "already exists" in again.stderr and "--force" in again.stderr
    assert KwokCluster(cluster_name).pids()["kube-apiserver"] == first_pid and alive(first_pid)
    forced = cli("up", "--name", cluster_name, "--node", H100_NODE, "--force")
    assert forced.returncode == 0, forced.stderr
    assert not alive(first_pid)
    assert KwokCluster(cluster_name).pids()["kube-apiserver"] != first_pid


def test_busy_port_is_refused_before_anything_starts(cluster_name: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        port = sock.getsockname()[1]
        up = cli("up", "--name", cluster_name, "--node", H100_NODE, "--port", str(port))
    assert up.returncode == 1
    assert f"port {port} is busy" in up.stderr
    assert not KwokCluster(cluster_name).exists()


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("--node", "n=v100-16gb:8:whole"), "unknown board 'v100-16gb'; valid boards: h100-80gb, h100-nvl-94gb"),
        (("--node", "n=h100-80gb:8:shared"), "unknown mode 'shared'; valid modes: whole, static-mig:<layout>, dynamic-mig"),
        (("--node", "n=h100-80gb:9:whole"), "count 9 is out of range; valid: 1 to 8"),
        (("--node", H100_NODE, "--k8s", "1.29"), "unknown Kubernetes minor '1.29'; valid: 1.34, 1.35, 1.36, 1.37"),
        (("--node", "n=h100-80gb:8:static-mig:nope"), "MIG layout 'nope' of h100-80gb is unknown; valid layouts: all-balanced"),
        (("--node", "Bad_Name=h100-80gb:8"), "not a valid DNS label"),
    ],
)
def test_bad_input_is_one_line_exit_2_and_starts_nothing(cluster_name: str, args: tuple[str, ...], expected: str) -> None:
    up = cli("up", "--name", cluster_name, *args)
    assert up.returncode == 2
    lines = up.stderr.strip().splitlines()
    assert len(lines) == 1 and expected in lines[0], up.stderr
    assert not KwokCluster(cluster_name).exists()


def test_bad_layout_file_names_the_key(cluster_name: str, tmp_path: Path) -> None:
    layout = tmp_path / "layout.yaml"
    layout.write_text("nodes:\n  - {name: a, board: h100-80gb, count: 2, gpus: 4}\n")
    up = cli("up", "--name", cluster_name, "--layout", str(layout))
    assert up.returncode == 2
    assert up.stderr.strip().count("\n") == 0
    assert f"unknown key 'gpus'; valid keys: {', '.join(NODE_KEYS)}" in up.stderr
    assert not KwokCluster(cluster_name).exists()


def test_two_ups_at_once_both_come_up_on_different_ports() -> None:
    names = [f"lc-{uuid.uuid4().hex[:8]}" for _ in range(2)]
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "testbed.cli", "up", "--name", n, "--node", H100_NODE],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for n in names]
        results = [p.communicate(timeout=300) for p in procs]
        assert [p.returncode for p in procs] == [0, 0], [err[-500:] for _, err in results]
        ports = [set(KwokCluster(n).ports()) for n in names]
        assert ports[0] and ports[1] and not ports[0] & ports[1]
        assert all(cli("status", "--name", n).returncode == 0 for n in names)
    finally:
        for n in names:
            KwokCluster(n).delete()
