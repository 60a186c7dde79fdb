"""The DeviceTaintRule helper without a cluster: the version it picks and the objects it writes (the live test,
suites/health/test_device_taint_rules_live.py, has the API server check them on 1.35 and 1.36)."""

from __future__ import annotations

import pytest

from testbed.kube.device_taint_rules import DeviceTaintRulesNotServed, preferred_version, rule_body


def test_the_most_stable_served_version_is_used() -> None:
    assert preferred_version({"v1alpha3"}) == "resource.k8s.io/v1alpha3"  # 1.35
    assert preferred_version({"v1alpha3", "v1beta2"}) == "resource.k8s.io/v1beta2"  # 1.36 with every version on
    assert preferred_version({"v1beta2", "v1"}) == "resource.k8s.io/v1"


def test_no_served_version_names_what_is_needed() -> None:
    with pytest.raises(DeviceTaintRulesNotServed, match="1.35"):
        preferred_version(set())


def test_a_device_or_a_whole_pool() -> None:
    one = rule_body("r", "gpu.nvidia.com", "node-a", "gpu-1", "NoExecute", api_version="resource.k8s.io/v1beta2")
    assert one == {"apiVersion": "resource.k8s.io/v1beta2", "kind": "DeviceTaintRule", "metadata": {"name": "r"}, "spec": {
        "deviceSelector": {"driver": "gpu.nvidia.com", "pool": "node-a", "device": "gpu-1"},
        "taint": {"key": "dra-testbed.io/maintenance", "effect": "NoExecute"}}}
    pool = rule_body("r", "gpu.nvidia.com", "node-a", None, "NoSchedule", value="disk")
    assert pool["spec"]["deviceSelector"] == {"driver": "gpu.nvidia.com", "pool": "node-a"}
    assert pool["spec"]["taint"] == {"key": "dra-testbed.io/maintenance", "value": "disk", "effect": "NoSchedule"}


def test_an_unknown_effect_is_refused() -> None:
    with pytest.raises(ValueError, match="NoSchedule, NoExecute, None"):
        rule_body("r", "d", "p", None, "Evict")
