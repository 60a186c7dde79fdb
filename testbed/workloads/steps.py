"""The steps of a workload, typed: what a runner records, a bundle stores and a replay re-runs.

On disk (a bundle's steps.json) each step is the object `to_json` gives, `{"op": ..., ...}`: the same
objects format-2 bundles have always held, so those still load (`from_json`, after
`bundle_schema.check_steps` has checked their shape).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar, Union

from testbed.workloads.model import ClaimSpec, PodSpec, SharedClaim


@dataclass(frozen=True)
class AddShared:
    """A standalone claim pods may reference."""

    claim: SharedClaim
    op: ClassVar[str] = "shared"

    def to_json(self) -> dict:
        return {"op": self.op, "claim": self.claim.name, "spec": self.claim.spec.describe()}


@dataclass(frozen=True)
class Arrive:
    """A pod (with its claim templates) is created."""

    pod: PodSpec
    op: ClassVar[str] = "arrive"

    def to_json(self) -> dict:
        return {"op": self.op, "pod": self.pod.describe()}


@dataclass(frozen=True)
class Depart:
    """A pod is deleted and its claims released."""

    pod: str
    op: ClassVar[str] = "depart"

    def to_json(self) -> dict:
        return {"op": self.op, "pod": self.pod}


@dataclass(frozen=True)
class Released:
    """Repartitioning check of a node with nothing of the workload left on it."""

    node: str
    op: ClassVar[str] = "released"

    def to_json(self) -> dict:
        return {"op": self.op, "node": self.node}


@dataclass(frozen=True)
class _NodeHardware:
    """A node named `node` with `count` x `board` in `mode` (whole, static-mig:<layout>, dynamic-mig)."""

    node: str
    board: str
    count: int
    mode: str
    op: ClassVar[str] = ""

    def to_json(self) -> dict:
        return {"op": self.op, "node": self.node, "board": self.board, "count": self.count, "mode": self.mode}


@dataclass(frozen=True)
class AddNode(_NodeHardware):
    """Hardware evolution: a machine with that hardware joins."""

    op: ClassVar[str] = "add-node"


@dataclass(frozen=True)
class ReplaceNode(_NodeHardware):
    """Hardware evolution: the node is drained, leaves, and comes back with that hardware."""

    op: ClassVar[str] = "replace-node"


@dataclass(frozen=True)
class SwitchMode:
    """Hardware evolution: node `node` is drained and switched to `mode` (whole, static-mig:<layout>, dynamic-mig)."""

    node: str
    mode: str
    op: ClassVar[str] = "switch-mode"

    def to_json(self) -> dict:
        return {"op": self.op, "node": self.node, "mode": self.mode}


@dataclass(frozen=True)
class RollDriver:
    """Hardware evolution: the driver is updated to generation `generation` with claims allocated and prepared."""

    generation: int
    op: ClassVar[str] = "roll-driver"

    def to_json(self) -> dict:
        return {"op": self.op, "generation": self.generation}


Step = Union[AddShared, Arrive, Depart, Released, AddNode, ReplaceNode, SwitchMode, RollDriver]
EVOLUTION = (AddNode, ReplaceNode, SwitchMode, RollDriver)


def from_json(data: dict) -> Step:
    """The step a steps.json object describes (shape already checked); ValueError for an unknown op."""
    op = data.get("op")
    if op == AddShared.op:
        return AddShared(SharedClaim(data["claim"], ClaimSpec.from_description(data["spec"])))
    if op == Arrive.op:
        return Arrive(PodSpec.from_description(data["pod"]))
    if op == Depart.op:
        return Depart(data["pod"])
    if op == Released.op:
        return Released(data["node"])
    if op in (AddNode.op, ReplaceNode.op):
        kind = AddNode if op == AddNode.op else ReplaceNode
        return kind(data["node"], data["board"], int(data["count"]), data["mode"])
    if op == SwitchMode.op:
        return SwitchMode(data["node"], data["mode"])
    if op == RollDriver.op:
        return RollDriver(int(data["generation"]))
    raise ValueError(f"unknown step {op!r}; valid: {', '.join(s.op for s in (AddShared, Arrive, Depart, Released) + EVOLUTION)}")
