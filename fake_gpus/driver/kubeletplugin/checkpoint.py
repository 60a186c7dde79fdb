"""The plugin's checkpoint: which claims are prepared (or half-prepared) and what was created for them.

One JSON file, replaced atomically (write, fsync, rename) on every change, so a plugin killed at any
moment restarts knowing every MIG instance it may have created and every CDI spec it wrote.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path

FORMAT = "dra-testbed-kubeletplugin-checkpoint"
VERSION = 1

PREPARING = "preparing"  # NVML changes may be under way: `planned` lists instances this claim may own
PREPARED = "prepared"


class CheckpointError(RuntimeError):
    """The checkpoint file exists but cannot be used; the message names the file."""


@dataclass
class MigRecord:
    """A MIG device (GPU instance + compute instance) on the GPU `gpu_uuid`."""

    gpu_uuid: str
    profile_id: int
    start: int
    size: int
    gi_id: int = -1
    ci_id: int = -1
    uuid: str = ""


@dataclass
class PreparedDevice:
    """One allocated device as prepared for a claim."""

    request_names: list[str]
    pool_name: str
    device_name: str
    cdi_device_ids: list[str]
    visible_uuid: str  # what NVIDIA_VISIBLE_DEVICES names for it
    mig: MigRecord | None = None
    created: bool = False  # the plugin created the MIG instance, so unprepare destroys it (the last of its claims, when shared)
    config: dict | None = None  # its normalized opaque config (gpuconfig.Sharing.canonical): what a claim sharing it must equal


@dataclass
class GroupRecord:
    """The devices of a claim that one config applies to, and what applying its strategy changed on the node
    (so unprepare, or a prepare that failed half-way, undoes exactly that)."""

    devices: list[str]
    time_slice_gpus: list[str] = field(default_factory=list)  # GPUs whose time slice was set
    mps_daemon: str = ""  # the control daemon's id (strategies.mps_daemon_id)
    mps_gpus: list[str] = field(default_factory=list)  # GPUs put in EXCLUSIVE_PROCESS for it


@dataclass
class ClaimRecord:
    namespace: str
    name: str
    state: str
    devices: list[PreparedDevice] = field(default_factory=list)
    planned: list[MigRecord] = field(default_factory=list)  # instances a PREPARING claim is creating
    cdi_spec: str | None = None
    groups: list[GroupRecord] = field(default_factory=list)


def _claim_from_dict(data: dict) -> ClaimRecord:
    devices = [PreparedDevice(**{**d, "mig": MigRecord(**d["mig"]) if d.get("mig") else None}) for d in data.get("devices", [])]
    planned = [MigRecord(**m) for m in data.get("planned", [])]
    groups = [GroupRecord(**g) for g in data.get("groups", [])]  # absent in checkpoints written before sharing
    return ClaimRecord(data["namespace"], data["name"], data["state"], devices, planned, data.get("cdi_spec"), groups)


class Checkpoint:
    """Claims by UID, loaded from and saved to `path`."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.claims: dict[str, ClaimRecord] = {}

    def load(self) -> "Checkpoint":
        if not self.path.exists():
            return self
        try:
            data = json.loads(self.path.read_text())
            if data.get("format") != FORMAT or data.get("version") != VERSION:
                raise CheckpointError(f"{self.path}: not a version-{VERSION} checkpoint of this plugin")
            self.claims = {uid: _claim_from_dict(c) for uid, c in data["claims"].items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise CheckpointError(f"{self.path}: unreadable checkpoint ({exc}); the plugin will not guess what it prepared") from exc
        return self

    def save(self) -> None:
        data = {"format": FORMAT, "version": VERSION, "claims": {uid: asdict(c) for uid, c in sorted(self.claims.items())}}
        self.path.parent.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_name(f".{self.path.name}.tmp")
        with open(tmp, "w") as f:
            json.dump(data, f, indent=1, sort_keys=True)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
