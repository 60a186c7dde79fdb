"""Compare the ResourceSlices of two drivers for one node: what a scheduler and a claim can see.

Compared: every slice's spec (driver, node, pool name and slice count, shared counters, devices in
their order, each device's attributes, capacities and counter consumption) and the owner references.
Slices are matched up by their first device or counter set, because NVIDIA's order across GPUs is not
stable. Not compared, by design (ALLOWED_DIFFERENCES): metadata the publishing library chooses.
"""

from __future__ import annotations

import copy
from typing import Any, Iterable

# Differences allowed between our driver and NVIDIA's on the same fake hardware (also in the README).
ALLOWED_DIFFERENCES = {
    "metadata.name": "slice names: NVIDIA's kubelet-plugin helper generates them (generateName), ours are stable",
    "metadata.labels": "our slices carry app.kubernetes.io/managed-by",
    "spec.pool.generation": "counts republishes, which each driver does at its own moments",
    "ownerReferences[].uid": "the Node's uid (the same node when both run on one node)",
    "device order across GPUs": "NVIDIA's is not stable; within a GPU it is compared",
    "order of existing MIG devices within a GPU": "NVIDIA's static-MIG order follows Go map iteration, not stable",
}


def _parent_minor(name: str) -> int:
    """The GPU minor a device name starts with (gpu-<minor>...); -1 for other names."""
    head = name.split("-")
    return int(head[1]) if len(head) > 1 and head[0] == "gpu" and head[1].isdigit() else -1


def _key(spec: dict) -> str:
    devices = spec.get("devices") or []
    sets = spec.get("sharedCounters") or []
    return devices[0]["name"] if devices else (sets[0]["name"] if sets else "")


def normalize(slices: Iterable[dict]) -> list[dict]:
    """Slices as compared: spec without generation, owner references without uid, sorted by content key."""
    out = []
    for s in slices:
        spec = copy.deepcopy(s["spec"])
        spec["pool"].pop("generation", None)
        if spec.get("devices"):
            # NVIDIA's order across GPUs is not stable; within a GPU it is kept (a stable sort by parent)
            # nor, for MIG devices that exist (static MIG), within a GPU (Go map order): those sort by name
            spec["devices"].sort(key=lambda d: (_parent_minor(d["name"]), "" if "consumesCounters" in d else d["name"]))
        owners = [{k: v for k, v in o.items() if k != "uid"} for o in s["metadata"].get("ownerReferences", [])]
        out.append({"key": _key(spec), "ownerReferences": owners, "spec": spec})
    return sorted(out, key=lambda s: (not s["spec"].get("sharedCounters") or bool(s["spec"].get("devices")), s["key"]))


def _diff(path: str, ours: Any, theirs: Any, out: list[str]) -> None:
    if isinstance(ours, dict) and isinstance(theirs, dict):
        for k in sorted(set(ours) | set(theirs)):
            if k not in theirs:
                out.append(f"{path}.{k}: only ours ({ours[k]!r:.80})")
            elif k not in ours:
                out.append(f"{path}.{k}: only NVIDIA's ({theirs[k]!r:.80})")
            else:
                _diff(f"{path}.{k}", ours[k], theirs[k], out)
    elif isinstance(ours, list) and isinstance(theirs, list):
        if all(isinstance(x, dict) and "name" in x for x in ours + theirs):
            names_o, names_t = [x["name"] for x in ours], [x["name"] for x in theirs]
            if names_o != names_t:
                at = next((i for i, (a, b) in enumerate(zip(names_o, names_t)) if a != b), min(len(names_o), len(names_t)))
                out.append(f"{path}: names differ from index {at}: ours {names_o[at:at + 4]} ({len(names_o)} in all), "
                           f"NVIDIA's {names_t[at:at + 4]} ({len(names_t)} in all)")
            theirs_by = {x["name"]: x for x in theirs}
            for x in ours:
                if x["name"] in theirs_by:
                    _diff(f"{path}[{x['name']}]", x, theirs_by[x["name"]], out)
            return
        if len(ours) != len(theirs):
            out.append(f"{path}: {len(ours)} entries in ours, {len(theirs)} in NVIDIA's")
        for i, (a, b) in enumerate(zip(ours, theirs)):
            _diff(f"{path}[{i}]", a, b, out)
    elif ours != theirs:
        out.append(f"{path}: ours {ours!r:.80}, NVIDIA's {theirs!r:.80}")


def differences(ours: Iterable[dict], theirs: Iterable[dict]) -> list[str]:
    """One line per difference between our slices and NVIDIA's for the same node (empty: identical)."""
    a, b = normalize(ours), normalize(theirs)
    out: list[str] = []
    if len(a) != len(b):
        out.append(f"slice count: ours {len(a)} ({[s['key'] for s in a]}), NVIDIA's {len(b)} ({[s['key'] for s in b]})")
    for x, y in zip(a, b):
        _diff(f"slice[{y['key']}]", {k: v for k, v in x.items() if k != "key"}, {k: v for k, v in y.items() if k != "key"}, out)
    return out


def our_slices(api, node: str, node_uid: str, state_dir, mode: str, minor: str, faults: frozenset[str] = frozenset(),
               served: bool = True) -> list[dict]:
    """What our driver publishes for `node` on the fake hardware at `state_dir` in `mode` (node contract text,
    `:shares=` included), with fault switches `faults`, as the API server stores it (created with dryRun, so
    nothing is written); not `served`: the bodies as built, for faults whose slices the API server refuses."""
    import json

    from kubernetes import client

    from fake_gpus.driver.identity import DriverIdentity
    from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
    from fake_gpus.driver.slices import api_limits, build_slices
    from fake_gpus.node import parse_mode
    from fake_gpus.nvml.build import SONAME, ensure_library

    inv = inventory(NvmlLibrary(ensure_library() / SONAME), state_dir)
    bodies = build_slices(node, inv, parse_mode(mode), api_limits(minor), DriverIdentity(), faults, node_uid=node_uid)
    if not served:
        return bodies
    resource = client.ResourceV1Api(api)
    return [json.loads(resource.create_resource_slice(body=b, dry_run="All", _preload_content=False).data) for b in bodies]
