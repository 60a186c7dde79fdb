"""A KWOK bed whose nodes' kubelet plugins run in one plugin host ($DRA_TESTBED_PLUGIN_HOST=host): pods holding
MIG claims on two nodes are prepared by the stand-in kubelet through the host and turn Running, each node's
NVML state holds its own pod's instance, no node has a plugin process of its own, and the host is gone
once the bed is."""

from __future__ import annotations

import os

import uuid

import pytest

from fake_gpus.nvml.state import validate_state_dir
from hostenv.processes import alive
from testbed.clusters.layout import Layout, parse_node_flag
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import until
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.plugin_host import HOSTING_ENV, served_generation
from testbed.kubelet.process import ON_DEMAND_DIR, plugin_pid

pytestmark = pytest.mark.cluster
# "full": this bed (a minute); `nox -s tests` runs the host against the stand-in kubelet (suites/plugin/test_multinode_host.py)
FULL_ENV = "DRA_TESTBED_PLUGIN_HOST_LIVE"

NODES = ("fph-a", "fph-b")
SMALL_MIG = {"deviceClassName": "mig.nvidia.com",
             "selectors": [{"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"}}]}


def test_a_bed_with_a_plugin_host_prepares_pods_to_running(bed, monkeypatch) -> None:
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip("the plugin host on a live bed runs in `nox -s plugin-host` ($DRA_TESTBED_PLUGIN_HOST_LIVE=full)")  # allowed in suites/skips.yaml
    monkeypatch.setenv(HOSTING_ENV, "host")
    layout = Layout(tuple(parse_node_flag(f"{n}=h100-80gb:1:dynamic-mig") for n in NODES), name="fleet-plugin-host")
    with bed(layout, backend="kwok") as tb:
        ns = f"fph-{uuid.uuid4().hex[:6]}"
        create_namespace(tb.core, ns)
        tb.resource.create_namespaced_resource_claim_template(ns, {"metadata": {"name": "mig"}, "spec": {"spec": {"devices": {
            "requests": [{"name": "r", "exactly": SMALL_MIG}]}}}})
        for node in NODES:
            tb.core.create_namespaced_pod(ns, {"metadata": {"name": node}, "spec": {
                "nodeSelector": {"kubernetes.io/hostname": node},
                "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}],
                "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "mig"}]}})
        for node in NODES:
            until(f"the pod on {node} Running", lambda: tb.core.read_namespaced_pod(node, ns).status.phase == "Running", timeout=180)
            assert (tb.core.read_namespaced_pod(node, ns).metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true"
        home = tb.cluster.home
        hosts = sorted((home / ON_DEMAND_DIR / "hosts").glob("*.pid"))
        assert [p.stem for p in hosts] == ["h0"], hosts
        host_pid = int(hosts[0].read_text())
        assert alive(host_pid)
        for node in NODES:
            assert plugin_pid(home, node) is None, f"{node} has a plugin process of its own"
            assert served_generation(home, node, "h0"), f"{node} not served by the host"
            assert len(validate_state_dir(home / "nvml" / node)[1].compute_instances) == 1, node
    assert not alive(host_pid), "the plugin host outlived its bed"
