"""What a driver restart changed in its ResourceSlices, as `slices.stable-restart` judges it.

Devices (and shared counter sets) are compared by name, as sets: the API gives their order no meaning
(`+listType=atomic`, no ordering rule in k8s.io/api resource/v1 or KEP-4381), and upstream's own slice
controller (k8s.io/dynamic-resource-allocation/resourceslice) matches a desired slice to a stored one by
its device names, writing a reordered list back in place at the same pool generation. So a restart that
only reorders is recorded, not failed; a new generation, a slice or device renamed, added or gone, or
any device's content changed is churn.
"""

from __future__ import annotations

from typing import Mapping


def fingerprint(slices: list[dict]) -> dict[str, dict]:
    """Per slice name: its pool generation, resourceVersion and spec."""
    return {s["metadata"]["name"]: {"generation": s["spec"]["pool"]["generation"],
                                    "resourceVersion": s["metadata"]["resourceVersion"], "spec": s["spec"]}
            for s in slices}


def _by_name(items: list[dict] | None) -> dict[str, dict]:
    return {i["name"]: i for i in items or []}


def _unordered(spec: dict) -> dict:
    """The spec with its devices and counter sets keyed by name (their order carries no meaning)."""
    return {**spec, "devices": _by_name(spec.get("devices")), "sharedCounters": _by_name(spec.get("sharedCounters"))}


def spec_diff(old: dict, new: dict, limit: int = 4) -> str:
    """What differs between two slice specs: devices gone or new, then per device the fields that differ."""
    before, after = _by_name(old.get("devices")), _by_name(new.get("devices"))
    parts = [f"device {n} gone" for n in sorted(set(before) - set(after))] + [f"device {n} new" for n in sorted(set(after) - set(before))]
    for name in sorted(set(before) & set(after)):
        for key in sorted(set(before[name]) | set(after[name])):
            if before[name].get(key) != after[name].get(key):
                a, b = before[name].get(key) or {}, after[name].get(key) or {}
                inner = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k)) if isinstance(a, dict) and isinstance(b, dict) else []
                parts.append(f"{name} {key}" + (f" {', '.join(inner)}: {[a.get(k) for k in inner]} -> {[b.get(k) for k in inner]}" if inner else ""))
    if not parts:
        o, n = _unordered(old), _unordered(new)
        parts = [f"{k} differs" for k in sorted(set(o) | set(n)) if o.get(k) != n.get(k)]
    return "; ".join(parts[:limit]) + (f"; and {len(parts) - limit} more" if len(parts) > limit else "")


def restart_changes(before: Mapping[str, dict], after: Mapping[str, dict]) -> tuple[list[str], list[str]]:
    """(churn, notes) between two fingerprints: churn fails the check; notes (an order-only rewrite) are evidence."""
    churn, notes = [], []
    for name in sorted(set(before) | set(after)):
        old, new = before.get(name), after.get(name)
        if old is None or new is None:
            churn.append(f"slice {name} {'appeared' if old is None else 'vanished'}")
        elif old["generation"] != new["generation"]:
            churn.append(f"slice {name}: pool generation {old['generation']} -> {new['generation']}")
        elif _unordered(old["spec"]) != _unordered(new["spec"]):
            churn.append(f"slice {name}: content changed ({spec_diff(old['spec'], new['spec'])})")
        elif old["resourceVersion"] != new["resourceVersion"]:
            order = [d["name"] for d in old["spec"].get("devices") or []], [d["name"] for d in new["spec"].get("devices") or []]
            notes.append(f"slice {name}: rewritten at the same generation with the same devices"
                         + (f", reordered {order[0]} -> {order[1]}" if order[0] != order[1] else ""))
    return churn, notes
