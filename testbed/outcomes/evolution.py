"""Hardware evolution: the same manifests on N fleets in order (A100 -> H100 -> B200 -> B300), and per pod what
each step from one fleet to the next does to it: keeps its board, moves to another, starts or stays pending (with
the reason), or schedules again."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Sequence

from testbed.outcomes.explain import PodOutcome
from testbed.outcomes.run import RunResult

# What a step did, in the order the per-step tally lists them.
STEP_KINDS = ("keeps", "moves", "starts pending", "stays pending", "schedules", "absent")


@dataclass(frozen=True)
class Step:
    """One pod across one step (fleet i -> fleet i+1)."""

    kind: str  # one of STEP_KINDS
    text: str  # for people: "moves a100-80gb -> h100-80gb", "starts pending: <reason>"


@dataclass(frozen=True)
class EvolutionRow:
    """One pod (by its stable label) on every fleet, and each step between them."""

    label: str
    pods: tuple[PodOutcome | None, ...]
    steps: tuple[Step, ...]


def reason(pod: PodOutcome) -> str:
    """The first thing that explains why a pod is not placed: our reason, else the scheduler's message."""
    return next(iter([*pod.reasons, pod.scheduler or ""]), "") or pod.verdict


def step(before: PodOutcome | None, after: PodOutcome | None) -> Step:
    if after is None:
        return Step("absent", "absent")
    placed_before, placed_after = bool(before and before.verdict == "scheduled"), after.verdict == "scheduled"
    if placed_after and not placed_before:
        return Step("schedules", f"schedules on {after.board}")
    if not placed_after:
        kind = "starts pending" if placed_before else "stays pending"
        return Step(kind, f"{kind}: {reason(after)}")
    if before and before.board == after.board:
        return Step("keeps", f"keeps {after.board}")
    return Step("moves", f"moves {before.board if before else '?'} -> {after.board}")


def evolution_rows(results: Sequence[RunResult], labels) -> list[EvolutionRow]:
    """Pods matched across the fleets by `labels(result, stable=True)`, in label order."""
    by_fleet = [{labels(r, stable=True)[id(p)]: p for p in r.pods} for r in results]
    rows = []
    for label in sorted({label for pods in by_fleet for label in pods}):
        pods = tuple(pods.get(label) for pods in by_fleet)
        rows.append(EvolutionRow(label, pods, tuple(step(a, b) for a, b in zip(pods, pods[1:]))))
    return rows


def step_tally(rows: Sequence[EvolutionRow], results: Sequence[RunResult]) -> list[str]:
    """One line per step: "fleet-a100 -> fleet-h100: 3 keep, 2 move, 1 starts pending"."""
    lines = []
    for i in range(len(results) - 1):
        counts = Counter(row.steps[i].kind for row in rows)
        parts = [f"{counts[kind]} {kind}" for kind in STEP_KINDS if counts[kind]]
        lines.append(f"{results[i].fleet} -> {results[i + 1].fleet}: " + ", ".join(parts))
    return lines
