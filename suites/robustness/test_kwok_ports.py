"""A KWOK component that is down for a moment keeps its port: kwokctl, which takes the highest free port
counting down from 32767, cannot hand it to the next cluster on the machine (a killed kube-scheduler's port
was taken by the next cluster's etcd, and every restart of it then exited with "address already in use")."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest
import yaml

from hostenv.processes import alive, run_group, terminate
from hostenv.versions import DEFAULT_MINOR
from testbed.host import leftovers
from testbed.clusters.features import as_flag, feature_gates, runtime_config
from testbed.clusters.kwok.cluster import BINARIES
from testbed.clusters.kwok.ports import COMPONENT_PORTS, component_ports
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.templates import render_template
from testbed.toolchain.resolve import ensure

KWOKCTL_COUNTDOWN = range(10001, 32768)  # kwokctl's GetUnusedPort: from 32767 down to 10001
LAYOUT = Layout((NodeSpec("port-a", "h100-80gb", 1, Mode("whole")),), name="ports")


def test_every_component_port_is_chosen_outside_kwokctls_countdown() -> None:
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    if low in KWOKCTL_COUNTDOWN:
        pytest.fail(f"the kernel's ephemeral range starts at {low}, inside kwokctl's countdown: the ports would not be safe")
    ports = component_ports()
    assert sorted(ports) == sorted(COMPONENT_PORTS) and len(set(ports.values())) == len(ports), ports
    assert not [p for p in ports.values() if p in KWOKCTL_COUNTDOWN], ports
    assert component_ports(apiserver_port=4567)["kubeApiserverPort"] == 4567  # the user's --port is kept
    rendered = yaml.safe_load_all(render_template("kwokctl.yaml.j2", kube_version="1.34.4", etcd_version="3.6.0", binaries=dict.fromkeys(BINARIES, "/bin/true"),
                                                  feature_gates="", runtime_config="", ports=ports, stages="", patches={},
                                                  scheduler_config=None))
    options = next(doc for doc in rendered if doc and doc.get("kind") == "KwokctlConfiguration")["options"]
    assert {k: options[k] for k in COMPONENT_PORTS} == ports


def _flag(pid: int, name: str) -> str:
    argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().split("\0")
    return next(a.split("=", 1)[1] for a in argv if a.startswith(f"--{name}="))


@pytest.mark.cluster
@pytest.mark.slow
def test_a_killed_scheduler_restarts_though_a_plain_kwokctl_cluster_was_made_meanwhile(bed, tmp_path: Path) -> None:
    with bed(LAYOUT, label="ports", backend="kwok") as testbed:
        cluster = testbed.cluster
        pid = cluster.pids()["kube-scheduler"]
        port = int(_flag(pid, "secure-port"))
        argv = Path(f"/proc/{pid}/cmdline").read_bytes().decode().rstrip("\0").split("\0")
        os.kill(pid, signal.SIGKILL)
        while alive(pid):
            time.sleep(0.1)
        # meanwhile someone makes a plain kwokctl cluster (its own port choice) on the machine
        with plain_kwokctl_cluster(tmp_path / "kwok", "ports-other"):
            log = tmp_path / "scheduler.log"
            with log.open("w") as sink:
                restarted = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True)
            try:
                time.sleep(8)
                assert restarted.poll() is None, f"the restarted scheduler exited: {log.read_text()[-400:]}"
            finally:
                (cluster.kwok_dir / "pids" / "kube-scheduler.pid").write_text(f"{restarted.pid}\n")  # the teardown stops it
        assert port not in KWOKCTL_COUNTDOWN


@contextmanager
def plain_kwokctl_cluster(workdir: Path, name: str) -> Iterator[None]:
    """A kwokctl cluster made as anyone would (kwokctl's own ports), in KWOK_WORKDIR `workdir`; removed whatever
    ends the test, Ctrl-C and SIGTERM too: its components run in sessions of their own, so nothing else stops them."""
    tc = ensure(DEFAULT_MINOR, BINARIES)
    kwokctl = str(tc.path("kwokctl"))
    env = dict(os.environ, KWOK_WORKDIR=str(workdir))
    kubeconfig = ["--kubeconfig", str(workdir / f"{name}.kubeconfig")]
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        out = run_group([kwokctl, "create", "cluster", "--name", name, *kubeconfig, "--runtime", "binary",
                         "--kube-apiserver-binary", str(tc.path("kube-apiserver")),
                         "--kube-controller-manager-binary", str(tc.path("kube-controller-manager")),
                         "--kube-scheduler-binary", str(tc.path("kube-scheduler")), "--etcd-binary", str(tc.path("etcd")),
                         "--kwok-controller-binary", str(tc.path("kwok")), "--kube-feature-gates", as_flag(feature_gates(DEFAULT_MINOR)),
                         "--kube-runtime-config", as_flag(runtime_config(DEFAULT_MINOR)), "--wait", "120s"], env=env, timeout=300)
        assert out.returncode == 0, f"kwokctl create cluster {name} failed: {(out.stderr or out.stdout)[-600:]}"
        yield
    finally:
        run_group([kwokctl, "delete", "cluster", "--name", name, *kubeconfig], env=env, timeout=120)
        for pid in leftovers.scan(workdir).processes:  # what a kwokctl stopped half-way started and never recorded
            terminate(pid)
