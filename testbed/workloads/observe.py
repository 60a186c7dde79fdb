"""What the cluster holds, as the properties read it: every ResourceClaim with its allocation, and the
devices of the ResourceSlices (a Snapshot of both)."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Mapping

from kubernetes import client
from kubernetes.utils.quantity import parse_quantity

from testbed.workloads.devices import DeviceId, Inventory
from testbed.workloads.oracle import Result


@dataclass
class ObservedClaim:
    namespace: str
    name: str
    node: str | None
    results: list[Result]
    config: list[dict]
    reserved_for: list[str]

    @property
    def owner(self) -> str:
        return f"{self.namespace}/{self.name}"


def _node_of(allocation: Mapping) -> str | None:
    """The node an allocation is pinned to (the scheduler writes `metadata.name In [node]`)."""
    for term in ((allocation.get("nodeSelector") or {}).get("nodeSelectorTerms") or []):
        for field_ in term.get("matchFields") or []:
            if field_.get("key") == "metadata.name" and field_.get("values"):
                return field_["values"][0]
    return None


def allocation_result(raw: Mapping) -> Result:
    """One allocation result; a share's consumed capacity keyed by fully qualified name, as the model keys capacity."""
    consumed = tuple(sorted((name if "/" in name else f"{raw['driver']}/{name}", Decimal(parse_quantity(amount)))
                            for name, amount in (raw.get("consumedCapacity") or {}).items()))
    return Result(raw["request"], DeviceId(raw["driver"], raw["pool"], raw["device"]), bool(raw.get("adminAccess")),
                  raw.get("shareID"), consumed)


def observe_claims(resource: client.ResourceV1Api) -> list[ObservedClaim]:
    """Every ResourceClaim of the cluster, with its allocation if it has one."""
    serialize = resource.api_client.sanitize_for_serialization
    claims = []
    for item in resource.list_resource_claim_for_all_namespaces().items:
        data = serialize(item)
        status = data.get("status") or {}
        allocation = status.get("allocation") or {}
        devices = allocation.get("devices") or {}
        results = [allocation_result(r) for r in devices.get("results") or []]
        claims.append(ObservedClaim(
            data["metadata"]["namespace"], data["metadata"]["name"], _node_of(allocation) if allocation else None,
            results, devices.get("config") or [], [r["name"] for r in status.get("reservedFor") or []],
        ))
    return claims


@dataclass
class Snapshot:
    inventory: Inventory
    claims: list[ObservedClaim]

    def allocated(self) -> list[ObservedClaim]:
        return [c for c in self.claims if c.results]

    def allocations(self) -> list[tuple[str, list[Result]]]:
        return [(c.owner, c.results) for c in self.allocated()]

    def claim(self, namespace: str, name: str) -> ObservedClaim | None:
        return next((c for c in self.claims if c.namespace == namespace and c.name == name), None)
