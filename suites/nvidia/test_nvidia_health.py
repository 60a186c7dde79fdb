"""NVIDIA's gpu-kubelet-plugin with gate NVMLDeviceHealthCheck on our fake NVML: the device taints it publishes
for injected faults, as testbed/drivers/nvidia/health.py observes them; the ground truth our driver's taints
are compared against (docs/design/health.md, "NVIDIA's binary on our fake", holds the table and timings).

The smoke (a fatal Xid, the lost GPU, a heal, an ignored Xid, and the refusal of DynamicMIG with the gate) runs
in `nox -s tests` in about half a minute; every scenario of health.SCENARIOS runs with
$DRA_TESTBED_NVIDIA_HEALTH=full (`nox -s health`, on 1.34 and 1.36). The apiserver decides what is
published: an effect `None` (what NVIDIA gives the Xids it ignores) is refused before 1.35, and with it the
whole republish of the node, so what these tests expect depends on the minor.
"""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from fake_gpus.driver.slices import server_minor
from testbed.clusters.layout import NodeSpec, parse_mode
from testbed.drivers.nvidia import health, plugin
from testbed.drivers.nvidia.health import Injection, Observation

pytestmark = pytest.mark.cluster

FULL = os.environ.get("DRA_TESTBED_NVIDIA_HEALTH") == "full"
NS, NONE = "NoSchedule", "None"
LOST = ("gpu.nvidia.com/gpu-lost", "", NS)
FIRST_MINOR_WITH_EFFECT_NONE = (1, 35)  # observed: 1.34 refuses it ("supported values: NoExecute, NoSchedule")


def xid(number: int, effect: str = NS) -> tuple[str, str, str]:
    return ("gpu.nvidia.com/xid", str(number), effect)


def effect_none_accepted(api: client.ApiClient) -> bool:
    major, minor = server_minor(client.VersionApi(api).get_code()).split(".")
    return (int(major), int(minor)) >= FIRST_MINOR_WITH_EFFECT_NONE


def _name() -> str:
    return f"nvh-{uuid.uuid4().hex[:6]}"


def test_fatal_xid_lost_gpu_heal_and_an_ignored_xid(testbed, nvidia_binary: Path, tmp_path: Path) -> None:
    """The smoke: a fatal Xid taints its GPU NoSchedule; a lost GPU taints every device of the node; a heal
    lifts nothing; an ignored Xid replaces the fatal one with effect None where the apiserver takes it."""
    name = _name()
    steps = [Injection("xid", 0, 79), Injection("lost", 1), Injection("heal", 1), Injection("xid", 0, 13)]
    run = health.observe(testbed.api, tmp_path, testbed.kubeconfig, nvidia_binary,
                         NodeSpec(name, "h100-80gb", 2, parse_mode("whole", name)), steps)
    assert run.initial == {"gpu-0": [], "gpu-1": []}
    fatal, lost, healed, ignored = (health.tainted(o.taints) for o in run.steps)
    assert fatal == {"gpu-0": [xid(79)]}
    assert lost == {"gpu-0": [LOST, xid(79)], "gpu-1": [LOST]}
    assert healed == lost, "NVIDIA's plugin never removes a taint while it runs"
    if effect_none_accepted(testbed.api):
        assert ignored == {"gpu-0": [LOST, xid(13, NONE)], "gpu-1": [LOST]}
    else:
        assert ignored == lost, "the republish with effect None is refused: the slice stays as it was"


def test_the_gate_is_refused_with_dynamic_mig(testbed, nvidia_binary: Path, tmp_path: Path) -> None:
    name = _name()
    with pytest.raises(plugin.PluginError) as refused:
        health.observe(testbed.api, tmp_path, testbed.kubeconfig, nvidia_binary,
                       NodeSpec(name, "h100-80gb", 1, parse_mode("dynamic-mig", name)), [])
    assert "feature gate DynamicMIG is currently mutually exclusive with NVMLDeviceHealthCheck" in str(refused.value)


def _expected(scenario: str, none_ok: bool, devices: list[str]) -> list[dict[str, list]]:
    """The tainted devices after each step of `scenario`, as NVIDIA's plugin published them (observed on
    1.34 and 1.36, two scenarios on 1.35, 2026-12-07); `devices` are the node's device names from its first publish."""
    if scenario == "fatal-xid-ecc-heal":
        xids = [{"gpu-0": [xid(79)]}, {"gpu-0": [xid(48)]}, {"gpu-0": [xid(48)], "gpu-1": [xid(94)]}]
        last = {"gpu-0": [xid(48)], "gpu-1": [xid(95)]}
        return [*xids, last, last, last, last, {}]  # ECC never taints; heal lifts nothing; a restart forgets all
    if scenario == "ignored-xids":
        if not none_ok:
            return [{}] * 8
        out, now = [], {}
        for gpu, (number, effect) in enumerate([(13, NONE), (31, NONE), (43, NONE), (45, NONE), (68, NONE), (109, NONE),
                                                (63, NONE), (64, NS)]):  # 63: --additional-xids-to-ignore; 64: not
            now = {**now, f"gpu-{gpu}": [xid(number, effect)]}
            out.append(now)
        return out
    if scenario == "ignored-then-fatal":
        if not none_ok:
            return [{"gpu-0": [xid(79)]}] * 3  # and nothing published after the refused None
        return [{"gpu-0": [xid(79)]}, {"gpu-0": [xid(13, NONE)]}, {"gpu-0": [xid(13, NONE)], "gpu-1": [xid(48)]}]
    every_lost = {d: [LOST] for d in devices}
    if scenario == "lost-heal-restart":
        return [every_lost, every_lost, {}]
    if scenario == "lost-restart":
        return [every_lost, every_lost]  # the restarted plugin exits (checked by the caller): the slice stays
    if scenario == "static-mig":
        one = {"gpu-0-mig-1g10gb-19-1": [xid(79)]}  # a GPU-wide Xid on a MIG-mode GPU matches no device: dropped
        return [one, one, one, {**every_lost, "gpu-0-mig-1g10gb-19-1": [LOST, xid(79)]}]
    if scenario == "static-mig-ignored":
        if not none_ok:
            return [{}, {}]
        return [{"gpu-0-mig-1g10gb-19-2": [xid(13, NONE)]},
                {"gpu-0-mig-1g10gb-19-2": [xid(13, NONE)], "gpu-0-mig-1g10gb-19-3": [xid(79)]}]
    raise AssertionError(f"no expectation for scenario {scenario}")


def _changed_in_time(o: Observation, before: dict, limit: float = 5.0) -> bool:
    """The step left the taints as they were (or its plugin exited), or the slice showed its change in time."""
    return health.tainted(o.taints) == before or bool(o.exited) or (o.seconds is not None and o.seconds < limit)


@pytest.mark.skipif(not FULL, reason="the injection table runs in `nox -s health` ($DRA_TESTBED_NVIDIA_HEALTH=full)")
@pytest.mark.parametrize("scenario", list(health.SCENARIOS))
def test_the_injection_table(testbed, nvidia_binary: Path, tmp_path: Path, scenario: str) -> None:
    run = health.observe_scenario(testbed.api, tmp_path, testbed.kubeconfig, nvidia_binary, scenario, _name())
    assert health.tainted(run.initial) == {}, "the first publish carries no taint"
    expected = _expected(scenario, effect_none_accepted(testbed.api), sorted(run.initial))
    assert [health.tainted(o.taints) for o in run.steps] == expected
    if scenario == "lost-restart":
        assert "GPU is lost" in run.steps[-1].exited, "a plugin started while a GPU is lost exits"
    before: dict = {}
    for o in run.steps:
        assert _changed_in_time(o, before), f"{o.injection}: the slice changed {o.seconds} s after it"
        before = health.tainted(o.taints)
