"""Reading a ResourceClaim's allocation from the API server: the devices this driver must prepare here."""

from __future__ import annotations

import json
from dataclasses import dataclass

from kubernetes import client, config
from kubernetes.client import ResourceV1Api  # eager: the client's lazy load would land in the first prepare (~0.2 s)
from kubernetes.client.exceptions import ApiException


class ClaimError(RuntimeError):
    """The claim cannot be prepared (missing, replaced, not allocated); the message goes into the response."""


@dataclass(frozen=True)
class AllocatedDevice:
    request: str
    pool: str
    device: str
    admin: bool = False  # allocated with adminAccess


def api_client(kubeconfig: str) -> client.ApiClient:
    """`in-cluster` for the pod's service account, else a kubeconfig path."""
    if kubeconfig == "in-cluster":
        cfg = client.Configuration()
        config.load_incluster_config(client_configuration=cfg)
        return client.ApiClient(cfg)
    return config.new_client_from_config(config_file=kubeconfig)


def read_claim(api: client.ApiClient, namespace: str, name: str) -> dict:
    """The claim as JSON (raw: no model classes, so any served field survives)."""
    try:
        resp = ResourceV1Api(api).read_namespaced_resource_claim(name, namespace, _preload_content=False, _request_timeout=30)
    except ApiException as exc:
        if exc.status == 404:
            raise ClaimError(f"ResourceClaim {namespace}/{name} not found") from exc
        raise ClaimError(f"reading ResourceClaim {namespace}/{name}: HTTP {exc.status} {exc.reason}") from exc
    return json.loads(resp.data)


def allocated_devices(claim: dict, uid: str, driver: str, pool: str) -> list[AllocatedDevice]:
    """This driver's devices from this node's pool in the claim's allocation; ClaimError if it is the wrong claim."""
    meta = claim.get("metadata", {})
    where = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
    if meta.get("uid") != uid:
        raise ClaimError(f"{where} has UID {meta.get('uid')}, not {uid}: it was deleted and created again")
    allocation = (claim.get("status") or {}).get("allocation")
    if not allocation:
        raise ClaimError(f"{where} is not allocated")
    results = (allocation.get("devices") or {}).get("results") or []
    return [AllocatedDevice(r["request"], r["pool"], r["device"], bool(r.get("adminAccess"))) for r in results
            if r.get("driver") == driver and r.get("pool") == pool]
