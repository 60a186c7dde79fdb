"""The fleet as the scheduler sees it, with user CEL evaluated by the scheduler's compiler.

Devices come from the published ResourceSlices (the oracle's Inventory); DeviceClasses and request
selectors become `CelSelector`s, which plug into the oracle's selector protocol, so the reference model
answers "where would these claims fit" for arbitrary user expressions.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Iterable, Mapping

from kubernetes import client

from testbed.kube.apiviews import dynamic_client
from testbed.outcomes.cel import Evaluation, evaluate
from testbed.workloads.devices import Device, DeviceId, Inventory
from testbed.workloads.model import ClaimSpec, MatchAttribute, Request, SubRequest
from testbed.workloads.selectors import AllOf

BOARD_LABEL = "dra-testbed.io/board"


@dataclass(frozen=True)
class CelSelector:
    """A user's CEL selector, its value on every published device computed by the scheduler's compiler."""

    expression: str
    results: Mapping[DeviceId, bool]
    errors: Mapping[DeviceId, str]
    compile_error: str | None = None

    def cel(self, driver: str) -> str:
        return self.expression

    def matches(self, device: Device) -> bool:
        return bool(self.results.get(device.id))

    def describe(self) -> dict:
        return {"cel": self.expression}

    def __hash__(self) -> int:
        return hash(self.expression)


@dataclass
class Fleet:
    """Nodes, devices, DeviceClasses and the evaluated selectors of one cluster at one moment."""

    minor: str
    inventory: Inventory
    raw_devices: dict[DeviceId, dict]
    boards: dict[str, str]  # node -> board key (or product name off the test bed)
    device_classes: dict[str, dict]
    selectors: dict[str, CelSelector] = field(default_factory=dict)

    @classmethod
    def read(cls, api: client.ApiClient, minor: str) -> Fleet:
        dyn = dynamic_client(api)
        slices = dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceSlice").get().to_dict()["items"]
        classes = dyn.resources.get(api_version="resource.k8s.io/v1", kind="DeviceClass").get().to_dict()["items"]
        nodes = client.CoreV1Api(api).list_node().items
        raw: dict[DeviceId, dict] = {}
        for item in slices:
            spec = item["spec"]
            for device in spec.get("devices") or []:
                raw[DeviceId(spec["driver"], spec["pool"]["name"], device["name"])] = device
        boards = {n.metadata.name: (n.metadata.labels or {}).get(BOARD_LABEL, "") for n in nodes}
        fleet = cls(minor, Inventory.from_slices(slices), raw, boards, {c["metadata"]["name"]: c for c in classes})
        for device in fleet.inventory.devices.values():
            if not fleet.boards.get(device.node or ""):
                fleet.boards[device.node or ""] = str(device.attribute("productName") or "?")
        return fleet

    def evaluate(self, expressions: Iterable[str]) -> None:
        """Evaluate the expressions not evaluated yet on every device, in one helper call."""
        todo = sorted({e for e in expressions if e not in self.selectors})
        ids = list(self.raw_devices)
        for result in evaluate(self.minor, todo, [(i.driver, self.raw_devices[i]) for i in ids]):
            self.selectors[result.expression] = _selector(result, ids)

    def class_selector(self, name: str) -> AllOf | None:
        """A DeviceClass's selectors as one predicate (None when no such class is served)."""
        device_class = self.device_classes.get(name)
        if device_class is None:
            return None
        expressions = [s["cel"]["expression"] for s in (device_class["spec"].get("selectors") or []) if s.get("cel")]
        self.evaluate(expressions)
        return AllOf(tuple(self.selectors[e] for e in expressions))

    def classes(self) -> dict[str, AllOf]:
        """Every served DeviceClass as the oracle's class table."""
        return {name: self.class_selector(name) for name in self.device_classes}  # type: ignore[misc]

    def board_of(self, device: Device) -> str:
        return self.boards.get(device.node or "", "") or "?"

    def claim_spec(self, spec: Mapping) -> ClaimSpec:
        """A ResourceClaim's spec (API dict form) as the oracle's ClaimSpec, its selectors evaluated."""
        devices = spec.get("devices") or {}
        expressions = []
        for request in devices.get("requests") or []:
            for sub in [request.get("exactly") or {}, *(request.get("firstAvailable") or [])]:
                expressions += [s["cel"]["expression"] for s in sub.get("selectors") or [] if s.get("cel")]
        self.evaluate(expressions)
        requests = tuple(self._request(r) for r in devices.get("requests") or [])
        constraints = tuple(MatchAttribute(c["matchAttribute"], tuple(c.get("requests") or ()))
                            for c in devices.get("constraints") or [] if c.get("matchAttribute"))
        return ClaimSpec(requests, constraints)

    def _request(self, request: Mapping) -> Request:
        if request.get("firstAvailable"):
            return Request(request["name"], tuple(self._sub(s["name"], s) for s in request["firstAvailable"]), True)
        return Request(request["name"], (self._sub(request["name"], request.get("exactly") or {}),))

    def _sub(self, name: str, body: Mapping) -> SubRequest:
        selectors = tuple(self.selectors[s["cel"]["expression"]] for s in body.get("selectors") or [] if s.get("cel"))
        return SubRequest(name, body.get("deviceClassName", ""), selectors,  # type: ignore[arg-type]
                          all_devices=body.get("allocationMode") == "All", count=int(body.get("count") or 1),
                          admin_access=bool(body.get("adminAccess")))


def _selector(result: Evaluation, ids: list[DeviceId]) -> CelSelector:
    return CelSelector(result.expression, dict(zip(ids, result.matches)),
                       {i: e for i, e in zip(ids, result.errors) if e}, result.compile_error)
