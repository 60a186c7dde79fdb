"""Consumable capacity (KEP-5075) as the scheduler's allocator reckons it: what one allocation of a device
consumes, given what the request asks and the device's capacity request policies.

The rules, from k8s.io/dynamic-resource-allocation structured (1.34, DRAConsumableCapacity):
- every capacity of the device is consumed, asked for or not: an unasked one consumes the policy's default,
  or the whole capacity when there is no policy or no default;
- an asked amount with no policy is consumed as asked; with `validRange` it is raised to `min`, then rounded up
  to `min + n*step`; with `validValues` it is raised to the first value not below it (or kept when above all);
- the consumed amount must then obey the policy (the default always does; otherwise not above `max`, a whole
  number of steps above `min`, or one of the valid values), else the device cannot serve the request;
- a request naming a capacity the device does not publish cannot be served by that device;
- what every allocation of a device consumes together never exceeds the capacity's value.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import ROUND_CEILING, Decimal
from typing import Mapping

from kubernetes.utils.quantity import parse_quantity


@dataclass(frozen=True)
class CapacityPolicy:
    """A capacity's `requestPolicy`: `default`, then `validRange` (min, max, step) or `validValues`."""

    default: Decimal | None = None
    minimum: Decimal | None = None
    maximum: Decimal | None = None
    step: Decimal | None = None
    valid_values: tuple[Decimal, ...] = ()

    @classmethod
    def parse(cls, raw: Mapping | None) -> CapacityPolicy | None:
        """A policy from its API dict form (None when the capacity has none)."""
        if not raw:
            return None
        quantity = lambda text: Decimal(parse_quantity(text)) if text is not None else None  # noqa: E731
        valid_range = raw.get("validRange") or {}
        return cls(quantity(raw.get("default")), quantity(valid_range.get("min")), quantity(valid_range.get("max")),
                   quantity(valid_range.get("step")), tuple(quantity(v) for v in raw.get("validValues") or ()))

    def rounded(self, asked: Decimal) -> Decimal:
        """What an asked amount consumes once rounded as the policy says (policy not yet checked)."""
        if self.minimum is not None:
            if asked < self.minimum:
                return self.minimum
            if self.step is None:
                return asked
            steps = ((asked - self.minimum) / self.step).to_integral_value(rounding=ROUND_CEILING)
            return self.minimum + steps * self.step
        if self.valid_values:
            return next((v for v in self.valid_values if asked <= v), asked)
        return asked

    def allows(self, consumed: Decimal) -> bool:
        """Whether consuming `consumed` obeys the policy."""
        if self.default is not None and consumed == self.default:
            return True
        if self.minimum is not None or self.maximum is not None or self.step is not None:
            if self.maximum is not None and consumed > self.maximum:
                return False
            if self.step is not None and (consumed - (self.minimum or Decimal(0))) % self.step != 0:
                return False
            return True
        if self.valid_values:
            return consumed in self.valid_values
        return True


def consumed_amount(asked: Decimal | None, value: Decimal, policy: CapacityPolicy | None) -> Decimal:
    """What one allocation consumes of a capacity of `value` when the request asks `asked` (None: not asked)."""
    if asked is None:
        return policy.default if policy is not None and policy.default is not None else value
    return policy.rounded(asked) if policy is not None else asked


def consumption(asked: Mapping[str, Decimal], capacity: Mapping[str, Decimal],
                policies: Mapping[str, CapacityPolicy]) -> dict[str, Decimal] | None:
    """What one allocation consumes of every capacity of a device (keys as `capacity` has them), or None when the
    device cannot serve the request: it lacks an asked capacity, or a consumed amount breaks its policy."""
    if any(name not in capacity for name in asked):
        return None
    consumed = {}
    for name, value in capacity.items():
        amount = consumed_amount(asked.get(name), value, policies.get(name))
        if name in policies and not policies[name].allows(amount):
            return None
        consumed[name] = amount
    return consumed


def fits(consumed: Mapping[str, Decimal], held: Mapping[str, Decimal], capacity: Mapping[str, Decimal]) -> bool:
    """Whether `consumed` fits beside what is already `held` of each capacity."""
    return all(held.get(name, Decimal(0)) + amount <= capacity[name] for name, amount in consumed.items())
