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


Step = Union[AddShared, Arrive, Depart, Released]


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
    raise ValueError(f"unknown step {op!r}; valid: {', '.join(s.op for s in (AddShared, Arrive, Depart, Released))}")
