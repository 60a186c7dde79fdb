"""What a node's driver holds, and what of it nobody owns any more: the campaign's leak and double-prepare checks.

A node's state is read from the outside (its fake NVML state directory, the plugin's checkpoint and
its CDI directory), never from the plugin process. A MIG instance on a dynamic-MIG node that no
prepared claim holds, a CDI spec or a checkpoint entry of a claim that no longer exists are leaks once
the cluster is quiet; a device prepared for two claims at once is a double allocation at any moment.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

from fake_gpus.driver.kubeletplugin.checkpoint import PREPARING, Checkpoint, ClaimRecord
from fake_gpus.nvml.state import StateError, validate_state_dir

CDI_MARK = "-claim_"


@dataclass
class NodeState:
    """One node's driver-side state as seen at one moment."""

    node: str
    dynamic: bool  # the plugin creates MIG instances here (a static-MIG node's instances are the admin's)
    instances: list[tuple[str, int, int]] = field(default_factory=list)  # (GPU uuid, start, size)
    checkpoint: dict[str, ClaimRecord] = field(default_factory=dict)  # claim uid -> record
    cdi_uids: list[str] = field(default_factory=list)  # claim uids with a CDI spec file


@dataclass
class Leaks:
    mig: list[str] = field(default_factory=list)
    cdi: list[str] = field(default_factory=list)
    prepared: list[str] = field(default_factory=list)  # checkpoint entries of claims that are gone

    @property
    def total(self) -> int:
        return len(self.mig) + len(self.cdi) + len(self.prepared)

    def as_dict(self) -> dict[str, list[str]]:
        return {"mig": self.mig, "cdi": self.cdi, "prepared": self.prepared}


def read_instances(state_dir: Path) -> list[tuple[str, int, int]]:
    """(GPU uuid, start, size) of every GPU instance in a fake NVML state directory."""
    if not (state_dir / "gpus").exists():
        return []  # not provisioned yet
    for attempt in range(20):
        try:
            gpus, mig = validate_state_dir(state_dir)
            break
        except StateError:
            if attempt == 19:
                raise  # never read as empty: an unreadable state would hide every leak
            time.sleep(0.05)  # read between two writes of a rewrite: read again
    uuids = {g.index: g.uuid for g in gpus}
    return [(uuids.get(gi.gpu, str(gi.gpu)), gi.start, gi.size) for gi in mig.gpu_instances]


def read_checkpoint(path: Path) -> dict[str, ClaimRecord]:
    """Claim records of a plugin checkpoint file (empty when there is none yet). Raises CheckpointError when it
    cannot be read: never read as empty, that would hide every prepared leak and double prepare."""
    return Checkpoint(path).load().claims


def cdi_uids(names: list[str]) -> list[str]:
    """Claim uids of our CDI spec file names (`k8s.<driver>_device-claim_<uid>.json`)."""
    return sorted(n.rsplit(CDI_MARK, 1)[1].removesuffix(".json") for n in names if CDI_MARK in n and n.endswith(".json"))


def leaks(states: list[NodeState], live: set[str]) -> Leaks:
    """What the nodes hold for claims not in `live` (uids of the claims that exist)."""
    found = Leaks()
    for s in states:
        held = set()
        for uid, record in s.checkpoint.items():
            if uid not in live:
                found.prepared.append(f"{s.node}: claim {record.namespace}/{record.name} ({uid}) still prepared")
                continue
            held |= {(d.mig.gpu_uuid, d.mig.start, d.mig.size) for d in record.devices if d.mig is not None}
            if record.state == PREPARING:
                held |= {(m.gpu_uuid, m.start, m.size) for m in record.planned}
        if s.dynamic:
            found.mig += [f"{s.node}: MIG instance {gpu} start {start} size {size} held by no claim"
                          for gpu, start, size in s.instances if (gpu, start, size) not in held]
        found.cdi += [f"{s.node}: CDI spec of claim {uid}, which is gone" for uid in s.cdi_uids if uid not in live]
    return found


def double_prepared(states: list[NodeState], allocated: set[tuple[str, str]] | None = None) -> list[str]:
    """Devices, or overlapping parts of one GPU (a whole GPU beside its MIG devices, MIG placements whose
    memory slices overlap), prepared for two claims at the same time on one node. With `allocated`
    ((namespace, name) of the claims allocated now), a record of a claim that is not is left out: the
    scheduler may hand a device on before the kubelet unprepares its predecessor, which DRA allows."""
    problems = []
    for s in states:
        names: dict[str, str] = {}
        parts: dict[str, list[tuple[float, float, str, str]]] = {}  # GPU uuid -> (first slice, end, claim uid, device)
        for uid, record in sorted(s.checkpoint.items()):
            if record.state == PREPARING or (allocated is not None and (record.namespace, record.name) not in allocated):
                continue
            for d in record.devices:
                if d.device_name in names and names[d.device_name] != uid:
                    problems.append(f"{s.node}: {d.device_name} prepared for claims {names[d.device_name]} and {uid}")
                names[d.device_name] = uid
                gpu, lo, hi = (d.mig.gpu_uuid, d.mig.start, d.mig.start + d.mig.size) if d.mig else (d.visible_uuid, 0, float("inf"))
                for other_lo, other_hi, other, device in parts.get(gpu, []):
                    if other != uid and lo < other_hi and other_lo < hi and device != d.device_name:
                        problems.append(f"{s.node}: {device} and {d.device_name} of GPU {gpu} overlap, prepared for claims {other} and {uid}")
                parts.setdefault(gpu, []).append((lo, hi, uid, d.device_name))
    return problems
