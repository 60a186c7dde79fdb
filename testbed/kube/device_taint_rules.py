"""DeviceTaintRules: an admin taints one device, or every device of a node's pool, without the driver's help
(maintenance drains). The API version is the most stable one the server serves the kind in: 1.35 serves it in
resource.k8s.io/v1alpha3 only (gate DRADeviceTaintRules), later minors also in a beta version; the object's
shape (a device selector of driver, pool and device, and one taint) is the same in each of them."""

from __future__ import annotations

from typing import Any

from kubernetes import client
from kubernetes.dynamic.exceptions import NotFoundError

from testbed.kube.apiviews import dynamic_client

GROUP = "resource.k8s.io"
KIND = "DeviceTaintRule"
# most stable first, as Kubernetes orders versions of a group
VERSION_PREFERENCE = ("v1", "v1beta2", "v1beta1", "v1alpha3")
EFFECTS = ("NoSchedule", "NoExecute", "None")
DRAIN_KEY = "dra-testbed.io/maintenance"


class DeviceTaintRulesNotServed(RuntimeError):
    """The server serves no version of DeviceTaintRule (before 1.35, or the gate or API version is off)."""


def served_version(api: client.ApiClient) -> str:
    """`resource.k8s.io/<version>` of DeviceTaintRule the server serves, the most stable first."""
    return preferred_version({r.group_version.split("/")[-1] for r in dynamic_client(api).resources.search(group=GROUP, kind=KIND)})


def preferred_version(served: set[str]) -> str:
    """The most stable of the `served` versions (of resource.k8s.io) as `resource.k8s.io/<version>`."""
    for version in VERSION_PREFERENCE:
        if version in served:
            return f"{GROUP}/{version}"
    raise DeviceTaintRulesNotServed(f"the server serves no {GROUP} version of {KIND} (seen: {sorted(served) or 'none'}); "
                                    "it needs Kubernetes 1.35+ with gate DRADeviceTaintRules and an API version that has it")


def rule_body(name: str, driver: str, pool: str, device: str | None, effect: str, key: str = DRAIN_KEY,
              value: str | None = None, api_version: str = f"{GROUP}/v1alpha3") -> dict[str, Any]:
    """A DeviceTaintRule tainting `device` of `pool` (every device of the pool when `device` is None)."""
    if effect not in EFFECTS:
        raise ValueError(f"taint effect {effect!r} is not one of {', '.join(EFFECTS)}")
    selector = {"driver": driver, "pool": pool, **({"device": device} if device else {})}
    taint = {"key": key, "effect": effect, **({"value": value} if value else {})}
    return {"apiVersion": api_version, "kind": KIND, "metadata": {"name": name},
            "spec": {"deviceSelector": selector, "taint": taint}}


def create_rule(api: client.ApiClient, name: str, driver: str, pool: str, device: str | None = None,
                effect: str = "NoExecute", key: str = DRAIN_KEY, value: str | None = None) -> dict[str, Any]:
    """Create the rule (see rule_body) in the served version; returns the object as created."""
    version = served_version(api)
    resource = dynamic_client(api).resources.get(api_version=version, kind=KIND)
    return resource.create(body=rule_body(name, driver, pool, device, effect, key, value, version)).to_dict()


def get_rule(api: client.ApiClient, name: str) -> dict[str, Any] | None:
    """The rule as stored (with its status, where the version has one), or None when there is none."""
    resource = dynamic_client(api).resources.get(api_version=served_version(api), kind=KIND)
    try:
        return resource.get(name=name).to_dict()
    except NotFoundError:
        return None


def delete_rule(api: client.ApiClient, name: str) -> bool:
    """Delete the rule; False when there was none."""
    resource = dynamic_client(api).resources.get(api_version=served_version(api), kind=KIND)
    try:
        resource.delete(name=name)
    except NotFoundError:
        return False
    return True
