"""KWOK nodes' driver credentials: each node's slices are written with that node's own token (the driver's
service account, bound to the Node), and the ValidatingAdmissionPolicy kind uses holds a token to its node."""

from __future__ import annotations

import json
import time

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from driver_helpers import IDENTITY
from fake_gpus.driver.credentials import NodeIdentity, NodeTokens
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT
from testbed.clusters.kwok import KwokCluster, node_object
from testbed.clusters.layout import Mode, NodeSpec
from testbed.kube.waiting import wait_for, wait_gone

pytestmark = pytest.mark.cluster

OWN, OTHER = "dyn-h100", "whole-b200"  # nodes of the scheduling bed (suites/driver/conftest.py)
DENIED = f"the driver on node {OWN} may not write ResourceSlices of node {OTHER}"


def node_client(bed, tokens: NodeTokens, node: str) -> client.ResourceV1Api:
    """The resource API as `node`'s driver: the publisher's pool, that node's token."""
    api = tokens.api
    api.configuration.api_key = {"authorization": tokens.bearer(node, None)}
    return client.ResourceV1Api(api)


def probe(node: str) -> dict:
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceSlice", "metadata": {"generateName": "probe-"},
            "spec": {"driver": "probe.dra-testbed.io", "nodeName": node,
                     "pool": {"name": node, "generation": 1, "resourceSliceCount": 1}, "devices": []}}


def refused(call, *args, **kwargs) -> ApiException:
    with pytest.raises(ApiException) as info:
        call(*args, **kwargs)
    return info.value


def test_a_nodes_token_writes_its_own_slices_and_no_other_nodes(scheduling_bed) -> None:
    """Create, update and delete with one node's token: allowed on its node, 403 from the policy on another."""
    bed = scheduling_bed
    tokens = NodeTokens(bed.api, NodeIdentity(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))
    mine = node_client(bed, tokens, OWN)
    who = client.AuthenticationV1Api(tokens.api).create_self_subject_review({"apiVersion": "authentication.k8s.io/v1",
                                                                            "kind": "SelfSubjectReview"}).status.user_info
    assert who.username == f"system:serviceaccount:{DRIVER_NAMESPACE}:{DRIVER_SERVICE_ACCOUNT}"
    assert who.extra["authentication.kubernetes.io/node-name"] == [OWN]

    made = mine.create_resource_slice(probe(OWN))
    made.spec.devices = [{"name": "probe-0"}]
    mine.replace_resource_slice(made.metadata.name, made)
    mine.delete_resource_slice(made.metadata.name)

    denied = refused(mine.create_resource_slice, probe(OTHER))
    assert denied.status == 403 and DENIED in json.loads(denied.body)["message"], denied.body
    theirs = next(s for s in bed.resource.list_resource_slice(field_selector=f"spec.nodeName={OTHER}").items
                  if s.spec.driver == IDENTITY.driver)
    for call, args in ((mine.replace_resource_slice, (theirs.metadata.name, theirs)), (mine.delete_resource_slice, (theirs.metadata.name,))):
        denied = refused(call, *args)
        assert denied.status == 403 and DENIED in json.loads(denied.body)["message"], denied.body
    # and moving one's own slice onto another node is refused too (the policy reads the object written)
    made = mine.create_resource_slice(probe(OWN))
    try:
        made.spec.node_name = OTHER
        denied = refused(mine.replace_resource_slice, made.metadata.name, made)
        assert denied.status in (403, 422), denied.body  # 422: nodeName is immutable, also a refusal
    finally:
        mine.delete_resource_slice(made.metadata.name)
    assert bed.resource.read_resource_slice(theirs.metadata.name).metadata.resource_version == theirs.metadata.resource_version


def test_a_nodes_token_dies_with_its_node(scheduling_bed) -> None:
    """The token is bound to the Node object: once the node is deleted the API server refuses it (401), after at
    most its authentication cache's lifetime (10 s by default) for a token it has just seen."""
    bed = scheduling_bed
    node = NodeSpec("cred-gone", "h100-80gb", 1, Mode("whole"))
    bed.core.create_node(body=node_object(node))
    tokens = NodeTokens(bed.api, NodeIdentity(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))
    try:
        mine = node_client(bed, tokens, node.name)
        mine.delete_resource_slice(mine.create_resource_slice(probe(node.name)).metadata.name)
    finally:
        bed.core.delete_node(node.name)
    wait_gone(bed.core.read_node, node.name, what=f"node {node.name} deleted")
    deadline = time.monotonic() + 30
    while True:
        try:
            mine.delete_resource_slice(mine.create_resource_slice(probe(node.name)).metadata.name)
        except ApiException as exc:
            assert exc.status == 401, exc.body
            break
        assert time.monotonic() < deadline, "a deleted node's token was still accepted after 30 s"
        time.sleep(1)
    for s in bed.resource.list_resource_slice(field_selector=f"spec.nodeName={node.name}").items:  # garbage-collected
        wait_gone(bed.resource.read_resource_slice, s.metadata.name, what=f"slice {s.metadata.name} of a gone node")


def test_the_publisher_writes_a_nodes_slices_with_the_drivers_account(scheduling_bed) -> None:
    """Without the driver account's RBAC the publisher cannot publish a new node (so it does not write with
    the cluster's admin credential); with it back, the node's pool appears."""
    bed = scheduling_bed
    rbac = client.RbacAuthorizationV1Api(bed.api)
    binding = rbac.read_cluster_role_binding("dra-testbed-driver")
    log = KwokCluster(bed.name).home / "publisher.log"
    seen = log.stat().st_size
    node = NodeSpec("cred-late", "h100-80gb", 1, Mode("whole"))
    rbac.delete_cluster_role_binding(binding.metadata.name)
    try:
        time.sleep(2)  # RBAC is read from the API server's informer cache: let it see the deletion
        bed.core.create_node(body=node_object(node))
        deadline = time.monotonic() + 60
        while "(403)" not in log.read_text(errors="replace")[seen:]:
            assert time.monotonic() < deadline, "the publisher logged no refused write"
            time.sleep(0.5)
        assert not bed.resource.list_resource_slice(field_selector=f"spec.nodeName={node.name}").items
    finally:
        binding.metadata.resource_version = None
        rbac.create_cluster_role_binding(binding)
    try:
        wait_for(bed.resource.list_resource_slice, lambda s: s.spec.pool.resource_slice_count >= 1,
                 field_selector=f"spec.nodeName={node.name}", what=f"{node.name}'s pool once RBAC is back", timeout=120)
    finally:
        bed.core.delete_node(node.name)
