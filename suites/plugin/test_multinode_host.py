"""A plugin host (fake_gpus.driver.kubeletplugin.multinode) serving two nodes in one process, started and
supervised through the stand-in kubelet's side (testbed.kubelet.plugin_host), driven over each node's own
sockets as the kubelet does: the nodes prepare and unprepare independently, each on its own NVML state, a
fault switch of one node hits only it, a node that fails to start leaves the other served, a killed host is
started again and still knows what it prepared, and stopping the stand-in's processes leaves nothing."""

from __future__ import annotations

import os
import signal
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from conftest import DRIVER, NODE, START_TIMEOUT
from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.kubeletplugin.kubelet_client import KubeletClient
from fake_gpus.machine.provision import provision
from fake_gpus.node import NodeHardware
from hostenv.processes import alive
from testbed.kubelet import process as standin
from testbed.kubelet.plugin_host import PLUGIN_MODULE, Hosts, HostedStarter

pytestmark = pytest.mark.cluster

OTHER = "plg-node-1"
MIG_1G = "gpu-0-mig-1g10gb-19-3"  # 1g.10gb at memory slice 3 of GPU 0
MIG_B = "gpu-1-mig-1g10gb-19-5"  # 1g.10gb at memory slice 5 of GPU 1


@dataclass
class HostedNode:
    name: str
    root: Path
    starter: HostedStarter

    @property
    def state_dir(self) -> Path:
        return self.root / "nvml"

    @property
    def registration_socket(self) -> Path:
        return self.root / "registry" / f"{DRIVER}-reg.sock"

    @property
    def dra_socket(self) -> Path:
        return self.root / "plugin" / "dra.sock"

    @property
    def serving(self) -> Path:
        return self.starter.node_file.with_suffix(".serving")

    def client(self) -> KubeletClient:
        return KubeletClient(self.registration_socket, self.dra_socket)


@pytest.fixture
def host(apiserver, nvml_lib_dir, node_dir):
    """host(faults={node: [...]}) -> (Hosts, {node: HostedNode}): NODE and OTHER, two H100s each, handed to one
    host by the stand-in's starters and served; everything stopped at teardown."""
    plugins_dir = node_dir / "home" / standin.ON_DEMAND_DIR
    plugins_dir.mkdir(parents=True)
    hosts = Hosts(plugins_dir)
    made: dict[str, HostedNode] = {}

    def make(faults: dict[str, list[str]] | None = None) -> tuple[Hosts, dict[str, HostedNode]]:
        for name in (NODE, OTHER):
            root = node_dir / name
            provision(root / "nvml", NodeHardware("h100-80gb", 2))
            args = ["--node-name", name, "--state-dir", str(root / "nvml"), "--nvml-lib-dir", str(nvml_lib_dir),
                    "--plugin-dir", str(root / "plugin"), "--registry-dir", str(root / "registry"),
                    "--cdi-dir", str(root / "cdi"), "--kubeconfig", str(apiserver.kubeconfig), "--mig", "dynamic"]
            how = standin.OnDemand([sys.executable, "-m", PLUGIN_MODULE, *args], str(root / "plugin.log"),
                                   fault_env((faults or {}).get(name, ())), str(root / "registry"), host="h0")
            made[name] = HostedNode(name, root, HostedStarter(name, how, hosts, generation="g1"))
        for node in made.values():
            node.starter.starting()
        for node in made.values():
            wait_for(node.serving.exists, f"{node.name} served")
        return hosts, made

    yield make
    hosts.stop_all()
    for node in made.values():
        node.starter.stop()


def wait_for(check, what: str, timeout: float = START_TIMEOUT) -> None:
    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def prepared(client: KubeletClient, claim) -> list[str]:
    entry = client.prepare([claim]).claims[claim.uid]
    assert entry.error == "", entry.error
    return [d.device_name for d in entry.devices]


def test_two_nodes_in_one_host_prepare_and_unprepare_each_on_its_own_nvml_state(host, make_claim, mig_instances) -> None:
    hosts, nodes = host()
    a, b = nodes[NODE], nodes[OTHER]
    assert hosts.procs["h0"].pid and len(hosts.procs) == 1  # one process for both
    claim_a, claim_b = make_claim([MIG_1G], pool=NODE), make_claim([MIG_B], pool=OTHER)
    with a.client() as ka, b.client() as kb:
        assert ka.get_info().endpoint == str(a.dra_socket) and kb.get_info().endpoint == str(b.dra_socket)
        assert prepared(ka, claim_a) == [MIG_1G]
        assert prepared(kb, claim_b) == [MIG_B]
        # each node's NVML state holds its own claim's instance, not the other's
        assert mig_instances(a.state_dir) == [{"minor": 0, "profile": "1g.10gb", "start": 3, "size": 1, "compute_instances": 1}]
        assert mig_instances(b.state_dir) == [{"minor": 1, "profile": "1g.10gb", "start": 5, "size": 1, "compute_instances": 1}]
        assert ka.unprepare([claim_a]).claims[claim_a.uid].error == ""
        assert mig_instances(a.state_dir) == [] and len(mig_instances(b.state_dir)) == 1
        assert list((a.root / "cdi").glob("*.json")) == [] and len(list((b.root / "cdi").glob("*.json"))) == 1
        assert kb.unprepare([claim_b]).claims[claim_b.uid].error == ""
        assert mig_instances(b.state_dir) == []


def test_a_fault_switch_of_one_node_hits_only_that_node(host, make_claim, mig_instances) -> None:
    _, nodes = host(faults={NODE: ["prepare-fails"]})
    a, b = nodes[NODE], nodes[OTHER]
    claim_a, claim_b = make_claim([MIG_1G], pool=NODE), make_claim([MIG_1G], pool=OTHER)
    with a.client() as ka, b.client() as kb:
        ka.get_info(), kb.get_info()
        assert "injected fault prepare-fails" in ka.prepare([claim_a]).claims[claim_a.uid].error
        assert prepared(kb, claim_b) == [MIG_1G]
        assert mig_instances(a.state_dir) == [] and len(mig_instances(b.state_dir)) == 1
        assert kb.unprepare([claim_b]).claims[claim_b.uid].error == ""


def test_a_node_that_cannot_start_leaves_the_others_served_and_a_removed_node_stops(host, make_claim) -> None:
    hosts, nodes = host()
    a, b = nodes[NODE], nodes[OTHER]
    broken = HostedStarter("plg-broken", standin.OnDemand(
        [sys.executable, "-m", PLUGIN_MODULE, "--node-name", "plg-broken", "--state-dir", str(a.root / "missing"),
         "--nvml-lib-dir", str(a.root), "--plugin-dir", str(a.root / "x"), "--registry-dir", str(a.root / "y")],
        str(a.root / "broken.log"), registry=str(a.root / "y"), host="h0"), hosts)
    broken.starting()
    failed = broken.node_file.with_suffix(".failed")
    wait_for(failed.exists, "the broken node's .failed")
    assert "no such directory" in failed.read_text()
    with b.client() as kb:
        assert kb.get_info().name == DRIVER
    broken.stop()
    a.starter.stop()  # the node left: its sockets go, the other node stays
    assert not a.registration_socket.exists() and not a.dra_socket.exists() and not a.serving.exists()
    claim = make_claim([MIG_1G], pool=OTHER)
    with b.client() as kb:
        kb.get_info()
        assert prepared(kb, claim) == [MIG_1G]
        assert kb.unprepare([claim]).claims[claim.uid].error == ""


def test_a_killed_host_is_started_again_and_unprepares_what_it_prepared(host, make_claim, mig_instances) -> None:
    hosts, nodes = host()
    a = nodes[NODE]
    claim = make_claim([MIG_1G], pool=NODE)
    with a.client() as ka:
        ka.get_info()
        assert prepared(ka, claim) == [MIG_1G]
    old = hosts.procs["h0"].pid
    os.kill(old, signal.SIGKILL)
    hosts.procs["h0"].wait()
    assert a.starter.exited() and nodes[OTHER].starter.exited()  # what the stand-in's supervisor looks at
    a.serving.unlink()  # a killed host never removed it: wait for the new host's
    a.starter.starting()
    assert hosts.procs["h0"].pid != old
    wait_for(a.serving.exists, "the restarted host serving the node")
    with a.client() as ka:
        ka.get_info()
        assert ka.unprepare([claim]).claims[claim.uid].error == ""  # its checkpoint survived the kill
    assert mig_instances(a.state_dir) == []


def test_stopping_the_stand_in_processes_leaves_no_host_and_no_socket(host, node_dir) -> None:
    hosts, nodes = host()
    pid = hosts.procs["h0"].pid
    standin.stop(node_dir / "home")  # what `dra-testbed down` does (the stand-in died first: it did not stop the host)
    wait_for(lambda: not alive(pid), "the host gone")
    assert not hosts.pid_file("h0").exists()
    for node in nodes.values():
        assert not node.registration_socket.exists() and not node.dra_socket.exists()
