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

from testbed.templates import render_template

if TYPE_CHECKING:
    from kubernetes import client

DRIVER_NAMESPACE = "dra-testbed-driver"
DRIVER_SERVICE_ACCOUNT = "dra-testbed-driver"
# what `apply_identity` loads: the client's creation helper and the typed APIs of the manifest's kinds (RBAC,
# admission policies), over a second of imports on a loaded machine, which `up` preloads while the control plane starts
API_MODULES = ("kubernetes.utils", "kubernetes.client.api.rbac_authorization_v1_api",
               "kubernetes.client.api.admissionregistration_v1_api")


def identity_manifest() -> str:
    """The YAML of the identity objects (namespace, service account, RBAC, policy and its binding)."""
    return render_template("driver-identity.yaml.j2", namespace=DRIVER_NAMESPACE, service_account=DRIVER_SERVICE_ACCOUNT)


def apply_identity(api: client.ApiClient) -> None:
    """Create the identity objects; those that exist already are left as they are (a restarted `up`)."""
    from kubernetes import utils  # loaded when used: `up` imports this module before the control plane starts

    for body in yaml.safe_load_all(identity_manifest()):
        try:
            utils.create_from_dict(api, body)
        except utils.FailToCreateError as exc:
            if any(e.status != 409 for e in exc.api_exceptions):
                raise
