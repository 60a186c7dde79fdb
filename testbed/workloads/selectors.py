"""Device selectors in a structured form that renders both CEL text and a Python predicate.

The scheduler evaluates the CEL; the oracle evaluates the predicate over the same device. Keeping one
AST for both means there is no CEL parser to get wrong, and a disagreement is a real finding.

Optional attributes (`profile` exists on MIG devices only) are guarded with `has()` in CEL: an
unguarded lookup of a missing key is a CEL runtime error, which makes the scheduler reject the whole
node instead of just the device.
"""

from __future__ import annotations

import operator
from dataclasses import dataclass
from decimal import Decimal
from typing import Callable, Protocol, Union

from testbed.workloads.devices import Device, Version

OPS: dict[str, Callable[[object, object], bool]] = {
    "<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">=": operator.ge, ">": operator.gt,
}
MIB = Decimal(2**20)


class Selector(Protocol):
    """A predicate over one device."""

    def cel(self, driver: str) -> str:
        """CEL text for a DeviceSelector, attributes looked up in `driver`'s domain."""

    def matches(self, device: Device) -> bool:
        """What that CEL evaluates to on `device`."""

    def describe(self) -> dict:
        """A JSON form, for bundles."""


def _attr(driver: str, name: str) -> str:
    return f"device.attributes['{driver}'].{name}"


def _quote(text: str) -> str:
    # selector values come from the catalog and strategies: no quote inside, but refuse rather than mis-render
    if "'" in text or "\\" in text:
        raise ValueError(f"cannot render {text!r} as a CEL string literal")
    return f"'{text}'"


@dataclass(frozen=True)
class DriverIs:
    """`device.driver == driver`."""

    driver: str

    def cel(self, driver: str) -> str:
        return f"device.driver == {_quote(self.driver)}"

    def matches(self, device: Device) -> bool:
        return device.driver == self.driver

    def describe(self) -> dict:
        return {"driverIs": self.driver}


@dataclass(frozen=True)
class StringIs:
    """A string attribute of the driver's domain equals (or, with `op='!='`, differs from) a value.

    A device without the attribute matches neither `==` nor `!=`.
    """

    attribute: str  # productName, profile, architecture, type, ...
    value: str
    op: str = "=="

    def cel(self, driver: str) -> str:
        ref = _attr(driver, self.attribute)
        return f"(has({ref}) && {ref} {self.op} {_quote(self.value)})"

    def matches(self, device: Device) -> bool:
        value = device.attribute(self.attribute)
        return isinstance(value, str) and OPS[self.op](value, self.value)

    def describe(self) -> dict:
        return {"string": self.attribute, "op": self.op, "value": self.value}


@dataclass(frozen=True)
class MemoryCompare:
    """The `memory` capacity compared with `mib` MiB."""

    op: str
    mib: int

    def cel(self, driver: str) -> str:
        ref = f"device.capacity['{driver}'].memory"
        return f"(has({ref}) && {ref}.compareTo(quantity('{self.mib}Mi')) {self.op} 0)"

    def matches(self, device: Device) -> bool:
        value = device.capacity_of("memory")
        return value is not None and OPS[self.op](value, self.mib * MIB)

    def describe(self) -> dict:
        return {"memory": self.op, "mib": self.mib}


@dataclass(frozen=True)
class VersionCompare:
    """A version attribute (driverVersion, cudaDriverVersion, ...) compared by semver precedence."""

    attribute: str
    op: str
    version: str

    def cel(self, driver: str) -> str:
        ref = _attr(driver, self.attribute)
        return f"(has({ref}) && {ref}.compareTo(semver({_quote(self.version)})) {self.op} 0)"

    def matches(self, device: Device) -> bool:
        value = device.attribute(self.attribute)
        return isinstance(value, Version) and OPS[self.op](value, Version.parse(self.version))

    def describe(self) -> dict:
        return {"version": self.attribute, "op": self.op, "value": self.version}


@dataclass(frozen=True)
class AllOf:
    parts: tuple[Selector, ...]

    def cel(self, driver: str) -> str:
        return "(" + " && ".join(p.cel(driver) for p in self.parts) + ")" if self.parts else "true"

    def matches(self, device: Device) -> bool:
        return all(p.matches(device) for p in self.parts)

    def describe(self) -> dict:
        return {"allOf": [p.describe() for p in self.parts]}


@dataclass(frozen=True)
class AnyOf:
    parts: tuple[Selector, ...]

    def cel(self, driver: str) -> str:
        return "(" + " || ".join(p.cel(driver) for p in self.parts) + ")" if self.parts else "false"

    def matches(self, device: Device) -> bool:
        return any(p.matches(device) for p in self.parts)

    def describe(self) -> dict:
        return {"anyOf": [p.describe() for p in self.parts]}


@dataclass(frozen=True)
class Not:
    part: Selector

    def cel(self, driver: str) -> str:
        return f"!{self.part.cel(driver)}"

    def matches(self, device: Device) -> bool:
        return not self.part.matches(device)

    def describe(self) -> dict:
        return {"not": self.part.describe()}


AnySelector = Union[DriverIs, StringIs, MemoryCompare, VersionCompare, AllOf, AnyOf, Not]


def from_description(data: dict) -> AnySelector:
    """Inverse of `describe()`: bundles store selectors as JSON and replay rebuilds them."""
    if "driverIs" in data:
        return DriverIs(data["driverIs"])
    if "string" in data:
        return StringIs(data["string"], data["value"], data["op"])
    if "memory" in data:
        return MemoryCompare(data["memory"], int(data["mib"]))
    if "version" in data:
        return VersionCompare(data["version"], data["op"], data["value"])
    if "allOf" in data:
        return AllOf(tuple(from_description(p) for p in data["allOf"]))
    if "anyOf" in data:
        return AnyOf(tuple(from_description(p) for p in data["anyOf"]))
    if "not" in data:
        return Not(from_description(data["not"]))
    raise ValueError(f"not a selector description: {data!r}")
