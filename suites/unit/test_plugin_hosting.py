"""Which nodes' kubelet plugins a plugin host serves (testbed.kubelet.plugin_host): the choice per fleet size
and $DRA_TESTBED_PLUGIN_HOST, a node's host, and what a hosted node's plugin must be."""

from __future__ import annotations

import sys

import pytest

from testbed.kubelet.plugin_host import (AUTO_FROM_NODES, HOSTING_ENV, NODES_PER_HOST, PLUGIN_MODULE, host_of, hosts_for,
                                         plugin_args)
from testbed.kubelet.process import OnDemand


def test_auto_gives_small_fleets_a_process_per_node_and_large_ones_a_host_per_500_nodes() -> None:
    assert hosts_for(AUTO_FROM_NODES - 1, {}) == 0
    assert hosts_for(AUTO_FROM_NODES, {}) == 1
    assert hosts_for(1213, {HOSTING_ENV: "auto"}) == -(-1213 // NODES_PER_HOST) == 3
    assert hosts_for(2, {HOSTING_ENV: "host"}) == 1
    assert hosts_for(5000, {HOSTING_ENV: "per-node"}) == 0


def test_a_bad_choice_names_the_valid_ones() -> None:
    with pytest.raises(ValueError, match="expected one of per-node, host, auto"):
        hosts_for(10, {HOSTING_ENV: "shared"})


def test_a_node_keeps_its_host_and_hosts_share_the_fleet() -> None:
    nodes = [f"node-{i}" for i in range(300)]
    assert all(host_of(n, 3) == host_of(n, 3) for n in nodes)
    assert {host_of(n, 3) for n in nodes} == {"h0", "h1", "h2"}
    assert host_of("node-0", 0) == ""


def test_a_hosted_node_must_run_our_plugin_module() -> None:
    ours = OnDemand([sys.executable, "-m", PLUGIN_MODULE, "--node-name", "a"], "log", host="h0")
    assert plugin_args(ours) == ["--node-name", "a"]
    with pytest.raises(ValueError, match="must be `python -m fake_gpus.driver.kubeletplugin"):
        plugin_args(OnDemand(["/usr/bin/gpu-kubelet-plugin", "--node-name", "a"], "log", host="h0"))
