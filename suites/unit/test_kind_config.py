"""The rendered kind config: one control plane runs controller-manager and scheduler without leader election."""

from __future__ import annotations

import yaml

from testbed.clusters.features import feature_gates, runtime_config
from testbed.templates import render_template


def test_kind_config_switches_leader_election_off_and_keeps_the_gates() -> None:
    text = render_template("kind.yaml.j2", cluster_name="x", feature_gates=feature_gates("1.34"), runtime_config=runtime_config("1.34"),
                           apiserver_port=None, pod_subnet="10.244.0.0/16", nodes=[{"role": "control-plane", "labels": {}, "mounts": []}])
    config = yaml.safe_load(text)
    patches = [yaml.safe_load(p) for p in config["kubeadmConfigPatches"]]
    cluster = next(p for p in patches if p["kind"] == "ClusterConfiguration")
    # a lost lease made both exit under load and back off for minutes (seen on kind 1.34 with load 100+)
    assert cluster["controllerManager"]["extraArgs"]["leader-elect"] == "false"
    assert cluster["scheduler"]["extraArgs"]["leader-elect"] == "false"
    assert config["featureGates"]["DRADeviceTaints"] is True
