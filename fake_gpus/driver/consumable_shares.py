"""Consumable shares: how a device that several claims may share is published (KEP-5075, consumable capacity).

As NVIDIA's gpu-kubelet-plugin with `--consumable-shares` (feature gate ConsumableShares; facts in
docs/design/sharing.md): the device gets `allowMultipleAllocations: true` and its `memory` capacity, rounded
down to whole MiB, a request policy with step 1Mi:
- `memory`: a claim takes the whole memory unless it asks for less (default = max, min 1Mi);
- `unlimited`: a claim takes nothing unless it asks (default 0, min 0);
- `<N>`: memory as `unlimited`, plus a capacity `shares` of N that a claim takes 1 of unless it asks
  (default 1, range 1..N, step 1).
A device without a memory capacity is only marked shareable. Our capacities are whole MiB already.

Dynamic MIG with `<N>`: NVIDIA's GPU counter set also gets a counter `shares` of N, which nothing consumes
(its full GPU's capacities and counter set are one Go map, which the rule above writes `shares` into before
the set is read; docs/design/sharing.md "Publishing"). Ours publishes the same (`shared_counter_set`).
"""

from __future__ import annotations

STEP = "1Mi"
SHARES_CAPACITY = "shares"

# fault switches that break one promise each (listed in fake_gpus.driver.faults)
NOT_MULTIPLE = "shares-not-multiple"  # the policy published, allowMultipleAllocations left out
EXCEEDS = "shares-exceed-device"  # the policy's maximum is twice the device's capacity
BAD_STEP = "shares-step-not-divisor"  # a step that does not divide the maximum (3Mi)


def _policy(default: str, minimum: str, maximum: str, step: str) -> dict:
    return {"default": default, "validRange": {"min": minimum, "max": maximum, "step": step}}


def apply_consumable_shares(device: dict, shares: str | None, faults: frozenset[str] = frozenset()) -> dict:
    """`device` (a published device body) made shareable as `shares` says; unchanged for None (disabled)."""
    if not shares:
        return device
    shared = dict(device, capacity=dict(device.get("capacity", {})))
    if NOT_MULTIPLE not in faults:
        shared["allowMultipleAllocations"] = True
    memory = shared["capacity"].get("memory")
    if memory is None:
        return shared
    value = memory["value"]
    maximum = _doubled(value) if EXCEEDS in faults else value
    step = "3Mi" if BAD_STEP in faults else STEP
    if shares == "memory":
        policy = _policy(maximum, step, maximum, step)
    else:
        policy = _policy("0", "0", maximum, step)
    shared["capacity"]["memory"] = {"value": value, "requestPolicy": policy}
    if shares not in ("memory", "unlimited"):
        shared["capacity"][SHARES_CAPACITY] = {"value": shares, "requestPolicy": _policy("1", "1", shares, "1")}
    return shared


def shared_counter_set(counter_set: dict, shares: str | None) -> dict:
    """A GPU's dynamic-MIG counter set whose full GPU is offered, as NVIDIA's driver publishes it under `shares`:
    with a counter `shares` of N when shares is a number (nothing consumes it)."""
    if not shares or shares in ("memory", "unlimited"):
        return counter_set
    return dict(counter_set, counters={**counter_set["counters"], SHARES_CAPACITY: {"value": shares}})


def _doubled(quantity: str) -> str:
    """Twice a binary quantity as slices.mebibytes writes it ("80Gi" -> "160Gi")."""
    digits = quantity.rstrip("KMGTPEi")
    return f"{int(digits) * 2}{quantity[len(digits):]}"
