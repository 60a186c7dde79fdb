"""A share of a device that several claims hold (consumable capacity): what it took, who else holds the device,
and what is left of it, in the words `try` shows beside the device."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal
from typing import Mapping, Sequence

from testbed.workloads.devices import Device
from testbed.workloads.observe import allocation_result


@dataclass(frozen=True)
class Share:
    """One allocation result that is a share (it has a shareID)."""

    took: dict[str, Decimal]  # capacity name (unqualified) -> consumed by this share
    others: tuple[str, ...]  # the pods (or, unreserved, the claims) holding the other shares of the device
    left: dict[str, Decimal]  # capacity name -> what no share holds


def _short(name: str) -> str:
    return name.rsplit("/", 1)[-1]


def _holders(claim: Mapping) -> list[str]:
    pods = [r["name"] for r in (claim.get("status") or {}).get("reservedFor") or [] if r.get("resource") == "pods"]
    return pods or [claim["metadata"]["name"]]


def share_of(result: Mapping, device: Device | None, claims: Sequence[Mapping]) -> Share | None:
    """The share `result` is of `device`, counted against every allocated claim; None when it is no share."""
    if result.get("shareID") is None:
        return None
    key = (result["driver"], result["pool"], result["device"])
    took = {_short(n): v for n, v in allocation_result(result).consumed}
    held: dict[str, Decimal] = {}
    others: list[str] = []
    for claim in claims:
        allocation = (claim.get("status") or {}).get("allocation") or {}
        for other in (allocation.get("devices") or {}).get("results") or []:
            if (other["driver"], other["pool"], other["device"]) != key or other.get("shareID") is None:
                continue
            for name, amount in allocation_result(other).consumed:
                held[_short(name)] = held.get(_short(name), Decimal(0)) + amount
            if other["shareID"] != result["shareID"]:
                others += _holders(claim)
    left = {}
    for name in took:
        value = device.capacity_of(name) if device else None
        if value is not None:
            left[name] = value - held.get(name, Decimal(0))
    return Share(took, tuple(sorted(set(others))), left)


def _amount(name: str, value: Decimal) -> str:
    if name == "memory":
        return f"{value / Decimal(2**30):.1f}".removesuffix(".0") + "Gi"
    return str(value.normalize()) if value == value.to_integral_value() else str(value)


def share_text(share: Share) -> str:
    """`shared: took memory 4Gi; with pod-b, pod-c; left memory 71.6Gi`."""
    took = ", ".join(f"{n} {_amount(n, v)}" for n, v in sorted(share.took.items())) or "nothing"
    parts = [f"shared: took {took}", f"with {', '.join(share.others)}" if share.others else "alone on it"]
    if share.left:
        parts.append("left " + ", ".join(f"{n} {_amount(n, v)}" for n, v in sorted(share.left.items())))
    return "; ".join(parts)
