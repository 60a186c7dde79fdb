"""Devices and shared counters as the scheduler reads them: parsed from resource.k8s.io/v1 ResourceSlices.

The inventory is built from the slices listed from the API (or their dict form in unit tests), never
from the catalog or the layout, so the model sees exactly what the scheduler sees.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from decimal import Decimal
from functools import total_ordering
from typing import Iterable, Mapping, Union

from kubernetes.utils.quantity import parse_quantity

from testbed.workloads.capacity import CapacityPolicy

_SEMVER = re.compile(r"^(\d+)\.(\d+)\.(\d+)(?:-([0-9A-Za-z.-]+))?(?:\+[0-9A-Za-z.-]+)?$")


@total_ordering
@dataclass(frozen=True)
class Version:
    """A semantic version compared by semver precedence (build metadata ignored)."""

    major: int
    minor: int
    patch: int
    pre: tuple[str, ...] = ()

    @classmethod
    def parse(cls, text: str) -> Version:
        match = _SEMVER.match(text)
        if not match:
            raise ValueError(f"not a semantic version: {text!r}")
        pre = tuple(match[4].split(".")) if match[4] else ()
        return cls(int(match[1]), int(match[2]), int(match[3]), pre)

    def _key(self) -> tuple:
        # a release sorts after its pre-releases; numeric identifiers sort before alphanumeric ones
        pre = tuple((0, int(p), "") if p.isdigit() else (1, 0, p) for p in self.pre)
        return (self.major, self.minor, self.patch, 1 if not self.pre else 0, pre)

    def __lt__(self, other: object) -> bool:
        if not isinstance(other, Version):
            return NotImplemented
        return self._key() < other._key()

    def __str__(self) -> str:
        return f"{self.major}.{self.minor}.{self.patch}" + ("-" + ".".join(self.pre) if self.pre else "")


AttributeValue = Union[str, int, bool, Version]


@dataclass(frozen=True)
class DeviceId:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True)
class CounterSetId:
    """A shared counter set; named uniquely within a pool (whether it sits in the devices' slice or not)."""

    driver: str
    pool: str
    name: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.name}"


@dataclass(frozen=True)
class Device:
    """One device of a slice, with attributes keyed by fully qualified name."""

    id: DeviceId
    node: str | None
    attributes: Mapping[str, AttributeValue]
    capacity: Mapping[str, Decimal]
    consumes: tuple[tuple[CounterSetId, tuple[tuple[str, Decimal], ...]], ...] = ()
    # consumable capacity: several allocations may hold the device at once, each consuming some of its capacity
    allow_multiple: bool = False
    policies: Mapping[str, CapacityPolicy] = field(default_factory=dict)  # capacity name -> its requestPolicy

    @property
    def driver(self) -> str:
        return self.id.driver

    def attribute(self, name: str) -> AttributeValue | None:
        """An attribute by short (driver's domain) or fully qualified name."""
        return self.attributes.get(name if "/" in name else f"{self.driver}/{name}")

    def capacity_of(self, name: str) -> Decimal | None:
        return self.capacity.get(name if "/" in name else f"{self.driver}/{name}")


def _qualified(driver: str, name: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _attribute_value(raw: Mapping) -> AttributeValue:
    for key in ("string", "bool", "int"):
        if raw.get(key) is not None:
            return raw[key]
    if raw.get("version") is not None:
        return Version.parse(raw["version"])
    raise ValueError(f"attribute with no known value type: {raw!r}")


@dataclass
class Inventory:
    """Every device and shared counter set of the cluster, by node."""

    devices: dict[DeviceId, Device] = field(default_factory=dict)
    counters: dict[CounterSetId, dict[str, Decimal]] = field(default_factory=dict)

    @classmethod
    def from_slices(cls, slices: Iterable[Mapping]) -> Inventory:
        """Parse slices in their API dict form (camelCase keys, as `sanitize_for_serialization` gives)."""
        inventory = cls()
        for item in slices:
            spec = item["spec"]
            driver, pool, node = spec["driver"], spec["pool"]["name"], spec.get("nodeName")
            for counter_set in spec.get("sharedCounters") or []:
                values = {name: Decimal(parse_quantity(c["value"])) for name, c in (counter_set.get("counters") or {}).items()}
                inventory.counters[CounterSetId(driver, pool, counter_set["name"])] = values
            for raw in spec.get("devices") or []:
                device_id = DeviceId(driver, pool, raw["name"])
                consumes = tuple(
                    (CounterSetId(driver, pool, c["counterSet"]),
                     tuple(sorted((name, Decimal(parse_quantity(v["value"]))) for name, v in (c.get("counters") or {}).items())))
                    for c in raw.get("consumesCounters") or []
                )
                inventory.devices[device_id] = Device(
                    id=device_id,
                    node=raw.get("nodeName") or node,
                    attributes={_qualified(driver, k): _attribute_value(v) for k, v in (raw.get("attributes") or {}).items()},
                    capacity={_qualified(driver, k): Decimal(parse_quantity(v["value"])) for k, v in (raw.get("capacity") or {}).items()},
                    consumes=consumes,
                    allow_multiple=bool(raw.get("allowMultipleAllocations")),
                    policies={_qualified(driver, k): policy for k, v in (raw.get("capacity") or {}).items()
                              if (policy := CapacityPolicy.parse(v.get("requestPolicy"))) is not None},
                )
        return inventory

    @classmethod
    def from_api(cls, resource_api) -> Inventory:
        """The inventory as the scheduler sees it now (`resource_api` is a ResourceV1Api)."""
        serialize = resource_api.api_client.sanitize_for_serialization
        return cls.from_slices(serialize(s) for s in resource_api.list_resource_slice().items)

    def nodes(self) -> list[str]:
        return sorted({d.node for d in self.devices.values() if d.node})

    def on_node(self, node: str) -> list[Device]:
        """The node's devices in a stable order (pool, then device name as published)."""
        return [d for d in self.devices.values() if d.node == node]
