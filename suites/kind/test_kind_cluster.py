"""A kind cluster on our offline node image: nodes are real kubelets and run pods."""

from __future__ import annotations

import json
import uuid

import pytest
from kubernetes import client

from testbed.kube.waiting import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.slow]


def workload_pod(name: str, image: str, node: str, args: list[str] | None = None) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeName": node, "restartPolicy": "Never", "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "args": args or []}],
        },
    }


def test_every_layout_node_is_a_ready_worker(kind_bed) -> None:
    nodes = kind_bed.core.list_node().items
    ready = {n.metadata.name for n in nodes if any(c.type == "Ready" and c.status == "True" for c in n.status.conditions)}
    assert {n.metadata.name for n in nodes} == ready
    for layout_node in ("gpu-whole", "gpu-mig"):
        assert kind_bed.worker(layout_node) in ready


def test_pod_without_a_claim_runs_and_sees_no_gpu(kind_bed) -> None:
    """The workload image runs on a worker; with no claim its container has no NVML to find."""
    namespace = "default"
    name = f"no-claim-{uuid.uuid4().hex[:6]}"
    kind_bed.core.create_namespaced_pod(namespace, workload_pod(name, kind_bed.workload_image, kind_bed.worker("gpu-whole")))
    try:
        wait_for(kind_bed.core.list_namespaced_pod, lambda p: p.status.phase in ("Succeeded", "Failed"),
                 name=name, namespace=namespace, what=f"pod {name} to finish", timeout=120)
        seen = json.loads(kind_bed.core.read_namespaced_pod_log(name, namespace).strip().splitlines()[-1])
        assert seen["devices"] == []
        assert "error" in seen
    finally:
        kind_bed.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def test_pods_on_different_nodes_reach_cluster_dns(kind_bed) -> None:
    """Pod networking across nodes: a worker's pod resolves the API service through CoreDNS."""
    namespace = "default"
    name = f"dns-{uuid.uuid4().hex[:6]}"
    pod = workload_pod(name, kind_bed.workload_image, kind_bed.worker("gpu-mig"))
    pod["spec"]["containers"][0]["command"] = ["python3", "-c",
                                               "import socket; print(socket.gethostbyname('kubernetes.default.svc.cluster.local'))"]
    kind_bed.core.create_namespaced_pod(namespace, pod)
    try:
        done = wait_for(kind_bed.core.list_namespaced_pod, lambda p: p.status.phase in ("Succeeded", "Failed"),
                        name=name, namespace=namespace, what=f"pod {name} to finish", timeout=120)
        assert done.status.phase == "Succeeded", kind_bed.core.read_namespaced_pod_log(name, namespace)
        assert kind_bed.core.read_namespaced_pod_log(name, namespace).strip() == "10.96.0.1"
    finally:
        kind_bed.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)


def test_the_campaigns_operator_credential_is_authorized_before_rbac(kind_bed) -> None:
    """The fault campaign's harness on kind talks as system:masters (kubeadm's super-admin), which the
    apiserver authorizes before RBAC: kind's admin.conf (kubeadm:cluster-admins, an RBAC binding) got 403
    from an apiserver restarted by the campaign until its RBAC caches synced."""
    from kubernetes import config

    from testbed.campaign.kind import operator_kubeconfig

    path = operator_kubeconfig(kind_bed.cluster)
    assert path.stat().st_mode & 0o077 == 0, oct(path.stat().st_mode)
    api = config.new_client_from_config(config_file=str(path))
    try:
        review = client.AuthenticationV1Api(api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                            "kind": "SelfSubjectReview"})
        assert "system:masters" in review.status.user_info.groups, review.status.user_info
        # kind's own credential is not: that is why the campaign does not use it
        mine = client.AuthenticationV1Api(kind_bed.api).create_self_subject_review(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"})
        assert "system:masters" not in mine.status.user_info.groups, mine.status.user_info
    finally:
        api.close()
