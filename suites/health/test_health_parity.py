"""Taint parity: our driver's device taints equal those of NVIDIA's gpu-kubelet-plugin with its
NVMLDeviceHealthCheck gate, for the same injections into the same fake hardware.

NVIDIA's plugin serves a KWOK node of 2 x H100 (whole GPUs); our health monitor watches the same node's NVML
state; faults are injected from this process (fake_gpus.nvml.health, what `dra-testbed gpu fail` appends).
After each injection, once NVIDIA's slice carries the taint, our slices for that node (built from the same
NVML state, our monitor's taints on them, checked by the API server with dryRun) are compared with NVIDIA's:
testbed.drivers.nvidia.parity's comparison, plus TIME_ADDED below. Heal is left out: NVIDIA's driver never
lifts a taint (docs/design/health.md).
"""

from __future__ import annotations

import json

import pytest
from kubernetes import client

from fake_gpus.driver.health import apply_taints
from fake_gpus.driver.health_watch import HealthWatch
from fake_gpus.driver.slices import api_limits, server_minor
from fake_gpus.node import parse_mode
from fake_gpus.nvml import health as injector
from fake_gpus.nvml.build import ensure_library
from testbed.drivers.nvidia import parity, plugin
from testbed.kube.waiting import until

from suites.nvidia.conftest import node_factory, nvidia_binary  # noqa: F401 - nvidia_binary is a fixture

pytestmark = pytest.mark.cluster

DRIVER = "gpu.nvidia.com"
GATE = "NVMLDeviceHealthCheck=true"
# Allowed beyond parity.ALLOWED_DIFFERENCES: when each taint was added, which the API server stamps at each
# driver's own write.
TIME_ADDED = "devices[].taints[].timeAdded"
BOUND_S = 15.0


def _without_time_added(slices: list[dict]) -> list[dict]:
    for s in slices:
        for d in s["spec"].get("devices") or ():
            for t in d.get("taints") or ():
                t.pop("timeAdded", None)
    return slices


def _taints_of(slices: list[dict]) -> dict[str, list]:
    return {d["name"]: [(t["key"], t.get("value"), t["effect"]) for t in d.get("taints") or ()]
            for s in slices for d in s["spec"].get("devices") or ()}


def _untainted(testbed, node, minor: str) -> list[dict]:
    """Our slices for the node before any fault (a lost GPU answers nothing: our publisher, too, keeps the
    node's last complete inventory)."""
    uid = testbed.core.read_node(node.node).metadata.uid
    return parity.our_slices(testbed.api, node.node, uid, node.views.state_dir, "whole", minor, served=False)


def _ours(testbed, untainted: list[dict], watch: HealthWatch, node, minor: str) -> list[dict]:
    bodies = apply_taints(json.loads(json.dumps(untainted)), DRIVER, watch.taints(node.node),
                          effect_none=api_limits(minor).taint_effect_none)
    resource = client.ResourceV1Api(testbed.api)
    return _without_time_added([json.loads(resource.create_resource_slice(body=b, dry_run="All", _preload_content=False).data)
                                for b in bodies])


@pytest.fixture
def health_node(testbed, nvidia_binary):  # noqa: F811
    with node_factory(testbed, nvidia_binary) as make:
        node = make("h100-80gb", 2, "whole", gates=(GATE,))
        plugin.wait_published(testbed.api, node)
        yield node


def _watch(node, faults_env: dict[str, str], monkeypatch) -> HealthWatch:
    for key, value in faults_env.items():
        monkeypatch.setenv(key, value)
    watch = HealthWatch(ensure_library(), DRIVER)
    watch.follow(node.node, parse_mode("whole:health"), node.views.state_dir)
    # registered before the first injection: events from before registration never arrive
    until("our monitor registered", lambda: watch.reported(node.node), timeout=BOUND_S)
    return watch


def test_taints_equal_nvidias_for_a_fatal_xid_and_a_lost_gpu(testbed, health_node, monkeypatch) -> None:
    node, minor = health_node, server_minor(client.VersionApi(testbed.api).get_code())
    untainted = _untainted(testbed, node, minor)
    watch = _watch(node, {}, monkeypatch)
    try:
        for gpu, kind, data, device, key in ((1, "xid", 79, "gpu-1", "gpu.nvidia.com/xid"), (0, "lost", 0, "gpu-0", "gpu.nvidia.com/gpu-lost")):
            injector.append(node.views.state_dir, gpu, kind, data)
            theirs = until(f"NVIDIA's {key} taint on {device}", lambda: (lambda p: p if p and any(
                k == key for k, _, _ in _taints_of(p).get(device, [])) else None)(plugin.published(testbed.api, node.node)), timeout=BOUND_S)
            until(f"our monitor's {key} taint", lambda: any(t.key == key for ts in watch.taints(node.node).values() for t in ts), timeout=BOUND_S)
            assert parity.differences(_ours(testbed, untainted, watch, node, minor), _without_time_added(theirs)) == []
    finally:
        watch.close()


def test_the_comparison_catches_a_wrong_effect(testbed, health_node, monkeypatch) -> None:
    node, minor = health_node, server_minor(client.VersionApi(testbed.api).get_code())
    untainted = _untainted(testbed, node, minor)
    watch = _watch(node, {"DRA_TESTBED_FAULTS": "taint-wrong-effect"}, monkeypatch)
    try:
        injector.append(node.views.state_dir, 1, "xid", 79)
        theirs = until("NVIDIA's xid taint", lambda: (lambda p: p if p and _taints_of(p).get("gpu-1") else None)(
            plugin.published(testbed.api, node.node)), timeout=BOUND_S)
        until("our monitor's report", lambda: watch.taints(node.node), timeout=BOUND_S)
        assert any("taints" in d for d in parity.differences(_ours(testbed, untainted, watch, node, minor), _without_time_added(theirs)))
    finally:
        watch.close()
