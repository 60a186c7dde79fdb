"""How the kind bed's nodes are set up for a fast `up`, checked on the running nodes: workers joined by file
discovery against the CA made for the cluster, containerd unpacks into memory, the workers booted from
an image holding the driver's image and not the control plane's."""

from __future__ import annotations

import pytest

from testbed.host.docker.dockerd import docker
from testbed.clusters.kind.images.node_storage import SNAPSHOTS_IN_NODE, containerd_name

pytestmark = [pytest.mark.kind, pytest.mark.slow]

KIND_WELL_KNOWN_TOKEN_ID = "abcdef"  # kind's own join token, which the bed replaces


def _in_node(node: str, *command: str) -> str:
    return docker("exec", node, *command).stdout


def test_every_node_trusts_the_ca_made_for_the_cluster(kind_bed) -> None:
    """kubeadm init took the CA it found mounted, and each worker joined trusting it (file discovery)."""
    ours = (kind_bed.cluster.home / "pki" / "ca.crt").read_text()
    for node in kind_bed.cluster.node_containers():
        assert _in_node(node, "cat", "/etc/kubernetes/pki/ca.crt") == ours, node


def test_the_join_token_is_the_clusters_own(kind_bed) -> None:
    secrets = kind_bed.core.list_namespaced_secret("kube-system", field_selector="type=bootstrap.kubernetes.io/token").items
    assert secrets, "no bootstrap token in kube-system"
    assert KIND_WELL_KNOWN_TOKEN_ID not in {s.metadata.name.removeprefix("bootstrap-token-") for s in secrets}


def test_every_nodes_containerd_unpacks_into_memory(kind_bed) -> None:
    for node in kind_bed.cluster.node_containers():
        assert _in_node(node, "findmnt", "-n", "-o", "FSTYPE", SNAPSHOTS_IN_NODE).strip() == "tmpfs", node


def test_workers_hold_the_driver_image_and_not_the_control_planes(kind_bed) -> None:
    driver_image = next(c.image for p in kind_bed.core.list_namespaced_pod("dra-testbed-driver").items for c in p.spec.containers)
    for node in kind_bed.cluster.node_containers():
        if node.endswith("-control-plane"):
            continue
        images = _in_node(node, "ctr", "--namespace", "k8s.io", "images", "ls", "-q").split()
        assert containerd_name(driver_image) in images, (node, images)
        assert not [i for i in images if "/kube-apiserver:" in i or "/etcd:" in i], (node, images)
