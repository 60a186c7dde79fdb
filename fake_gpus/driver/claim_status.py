"""Writing a ResourceClaim's `status.devices` by server-side apply: what the kubelet plugin's device status
(kubeletplugin/device_status.py) and the fabric-attach controller (fabric_attach.py) share.

`status.devices` is a map list keyed by driver, pool, device and shareID, and each entry's `conditions` a map
list keyed by type, so each writer applies under a field manager of its own and owns exactly the entries and
conditions it applied: two writers of one device's entry (the controller's attach condition, the plugin's
Ready and data) never overwrite each other, and an apply that leaves entries out removes only its own.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Callable

APPLY_CONTENT_TYPE = "application/apply-patch+yaml"  # JSON is YAML: the body goes as JSON

# (namespace, name, apply configuration, field manager) -> None; raises the client's ApiException
Apply = Callable[[str, str, dict, str], None]


def status_body(namespace: str, name: str, uid: str, entries: list[dict]) -> dict:
    """The apply configuration of `entries` (none: the manager's entries are removed). The UID makes the API
    server refuse the write to a claim deleted and created again under the same name."""
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace, "uid": uid},
            "status": {"devices": entries}}


def condition(kind: str, reason: str, message: str, when: datetime) -> dict:
    """A True metav1.Condition of `kind`."""
    return {"type": kind, "status": "True", "reason": reason, "message": message,
            "lastTransitionTime": when.astimezone(timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}


def error_text(exc: Exception) -> str:
    """One line for a failed write: the API's status and message where it gave them."""
    status = getattr(exc, "status", None)
    if not status:
        return f"{type(exc).__name__}: {exc}"
    try:
        message = json.loads(getattr(exc, "body", "") or "{}").get("message")
    except ValueError:
        message = None
    return f"HTTP {status} {message or getattr(exc, 'reason', '')}"


def api_apply(api) -> Apply:
    """An Apply through the client `api`: PATCH .../resourceclaims/NAME/status as an apply patch, forced (the
    entries are the manager's own; another manager that touched those fields loses them to it)."""
    from kubernetes.client.exceptions import ApiException

    def apply(namespace: str, name: str, body: dict, field_manager: str) -> None:
        path = f"/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}/status"
        serialized = api.param_serialize(method="PATCH", resource_path=path,
                                         query_params=[("fieldManager", field_manager), ("force", "true")],
                                         header_params={"Accept": "application/json", "Content-Type": APPLY_CONTENT_TYPE},
                                         body=json.dumps(body), auth_settings=["BearerToken"])
        response = api.call_api(*serialized, _request_timeout=30)
        response.read()
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
    return apply
