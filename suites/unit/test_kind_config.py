"""The rendered kind config: one control plane runs controller-manager and scheduler without leader election."""

from __future__ import annotations

import pytest
import yaml

from testbed.clusters.base import ClusterError
from testbed.clusters.kind.cluster import _backoff

from testbed.clusters.features import feature_gates, runtime_config
from testbed.templates import render_template


def test_kind_config_switches_leader_election_off_and_keeps_the_gates() -> None:
    text = render_template("kind.yaml.j2", cluster_name="x", feature_gates=feature_gates("1.34"), runtime_config=runtime_config("1.34"),
                           apiserver_port=None, pod_subnet="10.244.0.0/16", nodes=[{"role": "control-plane", "labels": {}, "mounts": [], "image": "node:1"}],
                           restart_backoff_max=None, join_patches=[])
    config = yaml.safe_load(text)
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    cluster = next(p for p in patches if p["kind"] == "ClusterConfiguration")
    # a lost lease made both exit under load and back off for minutes (seen on kind 1.34 with load 100+)
    assert cluster["controllerManager"]["extraArgs"]["leader-elect"] == "false"
    assert cluster["scheduler"]["extraArgs"]["leader-elect"] == "false"
    assert config["featureGates"]["DRADeviceTaints"] is True


def _kubelet_patch(restart_backoff_max: int | None) -> dict:
    text = render_template("kind.yaml.j2", cluster_name="x", feature_gates=feature_gates("1.34"), runtime_config=runtime_config("1.34"),
                           apiserver_port=None, pod_subnet="10.244.0.0/16", nodes=[{"role": "control-plane", "labels": {}, "mounts": [], "image": "node:1"}],
                           restart_backoff_max=restart_backoff_max, join_patches=[])
    patches = [yaml.safe_load(p) for p in yaml.safe_load(text)["kubeadmConfigPatches"]]
    return next(p for p in patches if p["kind"] == "KubeletConfiguration")


def test_a_capped_restart_back_off_reaches_the_kubelets_with_its_gate() -> None:
    kubelet = _kubelet_patch(restart_backoff_max=_backoff(10))
    # the kubelet refuses the field without the gate, and the gate without the field (its config validation)
    assert kubelet["featureGates"] == {"KubeletCrashLoopBackOffMax": True}
    assert kubelet["crashLoopBackOff"] == {"maxContainerRestartPeriod": "10s"}
    default = _kubelet_patch(restart_backoff_max=_backoff(None))
    assert "crashLoopBackOff" not in default and "featureGates" not in default


@pytest.mark.parametrize("seconds", [0, 0.5, 301, 2.5])
def test_a_back_off_cap_the_kubelet_would_refuse_is_refused_in_one_line(seconds: float) -> None:
    with pytest.raises(ClusterError, match=r"whole seconds from 1 to 300"):
        _backoff(seconds)
