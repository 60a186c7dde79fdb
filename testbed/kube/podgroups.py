"""PodGroups of scheduling.k8s.io/v1beta1 (Kubernetes 1.37, gate GenericWorkload): the gang a pod names.

The Python client has no typed API for them, so they go through the generic object calls. Pods join one
by `spec.schedulingGroup.podGroupName`; the scheduler's GangScheduling plugin admits a group's pods only
once `minCount` of them fit at the same time.
"""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

GROUP, VERSION, PLURAL = "scheduling.k8s.io", "v1beta1", "podgroups"
API_VERSION = f"{GROUP}/{VERSION}"


def podgroups_served(api: client.ApiClient) -> bool:
    """Whether the server lists podgroups under scheduling.k8s.io/v1beta1 (1.37+ with GenericWorkload on)."""
    try:
        resources = client.CustomObjectsApi(api).get_api_resources(GROUP, VERSION)
    except ApiException as exc:
        if exc.status == 404:  # the group version itself is not served
            return False
        raise
    return any(r.name == PLURAL for r in resources.resources)


def gang_podgroup(name: str, min_count: int, claims: list[dict[str, str]] | None = None) -> dict[str, Any]:
    """A standalone PodGroup whose pods schedule all-or-none once `min_count` fit; `claims`
    (PodGroupResourceClaim: name plus resourceClaimName or resourceClaimTemplateName) are shared by the group."""
    spec: dict[str, Any] = {"schedulingPolicy": {"gang": {"minCount": min_count}}}
    if claims:
        spec["resourceClaims"] = claims
    return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": name}, "spec": spec}


def create_podgroup(api: client.ApiClient, namespace: str, body: dict[str, Any]) -> dict[str, Any]:
    """Create `body` in `namespace`; ApiException as the server answers (404 where the API is not served)."""
    return client.CustomObjectsApi(api).create_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, body)


def read_podgroup(api: client.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return client.CustomObjectsApi(api).get_namespaced_custom_object(GROUP, VERSION, namespace, PLURAL, name)
