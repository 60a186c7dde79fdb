"""The driver's identity on a cluster: its service account, its RBAC and the ValidatingAdmissionPolicy that
holds each node's driver to that node's ResourceSlices (templates/driver-identity.yaml.j2, one definition
for kind and KWOK).

kind applies it with the rest of its driver manifest; KWOK applies it here through the API before any
node exists, so the publisher can request each node's token (fake_gpus/driver/credentials.py) as soon as
it sees the node.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import yaml

from fake_gpus.driver import rest
from testbed.templates import render_template

if TYPE_CHECKING:
    from kubernetes import client

DRIVER_NAMESPACE = "dra-testbed-driver"
DRIVER_SERVICE_ACCOUNT = "dra-testbed-driver"
# the ValidatingAdmissionPolicy holding each node's driver to that node's slices, and its binding
POLICY_NAME = "dra-testbed-driver-own-node-slices"
# the manifest's kinds -> their resource names: created by path (fake_gpus.driver.rest), since the client's
# typed APIs for them (core, RBAC, admission policies) cost over 2 s of CPU to import while the control plane starts
RESOURCES = {"Namespace": "namespaces", "ServiceAccount": "serviceaccounts", "ClusterRole": "clusterroles",
             "ClusterRoleBinding": "clusterrolebindings", "ValidatingAdmissionPolicy": "validatingadmissionpolicies",
             "ValidatingAdmissionPolicyBinding": "validatingadmissionpolicybindings"}


def identity_manifest() -> str:
    """The YAML of the identity objects (namespace, service account, RBAC, policy and its binding)."""
    return render_template("driver-identity.yaml.j2", namespace=DRIVER_NAMESPACE, service_account=DRIVER_SERVICE_ACCOUNT,
                           policy=POLICY_NAME)


def collection_path(body: dict) -> str:
    """The API path of the collection `body` (one of RESOURCES' kinds) is created in."""
    version = body["apiVersion"]
    namespace = body["metadata"].get("namespace")
    return (("/api/v1" if version == "v1" else f"/apis/{version}")
            + (f"/namespaces/{namespace}" if namespace else "") + f"/{RESOURCES[body['kind']]}")


def apply_identity(api: client.ApiClient) -> None:
    """Create the identity objects; those that exist already are left as they are (a restarted `up`)."""
    for body in yaml.safe_load_all(identity_manifest()):
        rest.create(api, collection_path(body), body, exist_ok=True)
