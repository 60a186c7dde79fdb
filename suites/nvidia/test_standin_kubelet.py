"""The stand-in kubelet drives NVIDIA's plugin for pods bound to its KWOK node, as the kubelet would.

A pod's claim is prepared once the scheduler has bound the pod (then the pod is marked prepared); a
failing prepare (here: the node's plugin is not running) gives kubelet-style Warning events and is
retried until it succeeds; deleting the pod unprepares its claim and the MIG instance goes.

(A prepare that fails half-way in NVIDIA's driver, after the MIG instance exists, is not recoverable at
commit 9593204: its rollback parses the device name into a MigSpecTuple without the parent's PCI bus
id and then looks the parent up by that empty id, "could not get device handle by UUID for ''".)
"""

from __future__ import annotations

import threading

import pytest

from fake_gpus.nvml import state
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.daemon import FAILED_REASON, daemon_for
from testbed.drivers.nvidia import plugin
from testbed.kube.waiting import until

pytestmark = pytest.mark.cluster

SMALL = "device.attributes['gpu.nvidia.com'].profile == '1g.10gb'"




def test_prepare_after_binding_retry_with_events_and_unprepare_on_delete(testbed, namespace, nvidia_node, nvidia_binary):
    node = nvidia_node("h100-80gb", 1, "dynamic-mig")
    plugin.wait_published(testbed.api, node)
    # stopped before the stand-in starts: stopped after, under load the stand-in registered it just before
    # it went, then called its dead endpoint until the deadline (a cold CI run saw DEADLINE_EXCEEDED)
    plugin.stop(node)  # its slices stay; the kubelet finds no plugin to call
    daemon = daemon_for(testbed.api, {node.node: node.registry_dir}, plugin.DRIVER)
    runner = threading.Thread(target=daemon.run, daemon=True)
    runner.start()
    try:
        testbed.resource.create_namespaced_resource_claim(namespace, {
            "metadata": {"name": "small"},
            "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "mig.nvidia.com",
                                                                         "selectors": [{"cel": {"expression": SMALL}}]}}]}}})
        testbed.core.create_namespaced_pod(namespace, {
            "metadata": {"name": "p"},
            "spec": {"nodeSelector": {"kubernetes.io/hostname": node.node},
                     "containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "small"}]}}],
                     "resourceClaims": [{"name": "small", "resourceClaimName": "small"}]}})

        def failures():
            events = testbed.core.list_namespaced_event(namespace, field_selector="involvedObject.name=p").items
            return [e for e in events if e.reason == FAILED_REASON and e.type == "Warning"]

        first = until("a FailedPrepareDynamicResources event", failures)
        assert "DRA driver gpu.nvidia.com is not registered" in first[0].message, first[0].message
        until("a retry (a second event)", lambda: len(failures()) >= 2)
        pod = testbed.core.read_namespaced_pod("p", namespace)
        assert PREPARED_ANNOTATION not in (pod.metadata.annotations or {})

        plugin.start(nvidia_binary, node, testbed.kubeconfig, "dynamic-mig")  # back: registered, the next retry succeeds
        until(f"the pod marked prepared (events: {[e.message for e in failures()][-2:]})",
               lambda: (testbed.core.read_namespaced_pod("p", namespace).metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true")
        _, mig = state.validate_state_dir(node.views.state_dir)
        assert [(g.profile_id) for g in mig.gpu_instances] == [19], mig

        testbed.core.delete_namespaced_pod("p", namespace, grace_period_seconds=0)
        until("the instance destroyed after the pod went",
               lambda: not state.validate_state_dir(node.views.state_dir)[1].gpu_instances)
    finally:
        daemon.stop.set()
        runner.join(timeout=30)
        for k in daemon.kubelets.values():
            k.close()
