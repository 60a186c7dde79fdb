"""Outcomes for people: a rich table, JSON, or an HTML report (the project's report style), one fleet, two side by
side, or more in order (hardware evolution: a change column per step)."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Sequence

from rich.console import Console
from rich.table import Table

from testbed.outcomes.evolution import evolution_rows, step_tally
from testbed.outcomes.explain import Allocation, PodOutcome
from testbed.outcomes.run import RunResult
from testbed.templates import render_html

VERDICT_STYLE = {"scheduled": "green", "pending": "red", "gated": "yellow", "unsettled": "yellow"}


def labels(result: RunResult, run_namespaces: Sequence[str] = (), stable: bool = False) -> dict[int, str]:
    """A name for each pod: workload and ordinal, not the random pod name. `stable`: the same on every
    fleet, so a workload the server named (generateName) goes by the prefix it was given."""
    groups: dict[tuple[str, str], list[PodOutcome]] = defaultdict(list)
    for pod in result.pods:
        groups[(pod.namespace, pod.owner)].append(pod)
    named: dict[int, str] = {}
    for (namespace, owner), pods in groups.items():
        shown = "" if namespace.startswith("try-") or namespace in run_namespaces else f"{namespace}/"
        if stable:
            owner = result.generated.get(owner, owner)
        for index, pod in enumerate(sorted(pods, key=lambda p: p.name)):
            name = result.generated.get(f"Pod/{pod.name}", f"Pod/{pod.name}").removeprefix("Pod/") if stable else pod.name
            named[id(pod)] = f"{shown}{name}" if not owner else f"{shown}{owner} #{index + 1}"
    return named


def device_text(allocation: Allocation) -> str:
    facts = ", ".join(x for x in (allocation.profile or allocation.product, allocation.memory, allocation.share) if x)
    return f"{allocation.device} ({facts})" if facts else allocation.device


def placement(pod: PodOutcome) -> str:
    if pod.verdict != "scheduled":
        return pod.verdict + (" (allowed)" if pod.may_pend else "")
    return f"{pod.node} ({pod.board})"


def why(pod: PodOutcome) -> list[str]:
    lines = [f"scheduler: {pod.scheduler}"] if pod.scheduler else []
    return lines + pod.reasons


def legacy_text(pod: PodOutcome) -> str:
    if not pod.legacy:
        return ""
    asked = ", ".join(f"{k}: {v}" for k, v in pod.legacy.items())
    return f"legacy {asked}: " + ("served through DRA" if pod.verdict == "scheduled" else "not served")


def table(result: RunResult, console: Console) -> None:
    """One fleet: pod, verdict, node and board, devices, why."""
    names = labels(result)
    grid = Table(title=f"{result.fleet} (Kubernetes {result.server})", show_lines=True)
    for column in ("pod", "verdict", "node (board)", "devices", "why pending"):
        grid.add_column(column, overflow="fold")
    for pod in result.pods:
        devices = "\n".join(device_text(a) for a in pod.allocations)
        if pod.legacy:
            devices = "\n".join(x for x in (devices, legacy_text(pod)) if x)
        style = VERDICT_STYLE.get(pod.verdict, "")
        grid.add_row(names[id(pod)], f"[{style}]{pod.verdict}[/{style}]" + (" (allowed)" if pod.may_pend else ""),
                     pod.node and f"{pod.node} ({pod.board})" or "", devices, "\n".join(why(pod)))
    console.print(grid)
    claims_table(result, console)
    console.print(summary(result))
    for line in remarks(result):
        console.print(line, markup=False, highlight=False)


def claims_table(result: RunResult, console: Console) -> None:
    """The input's ResourceClaims (devices, or why none) and DeviceClasses (what they select)."""
    if result.claims:
        grid = Table(title="ResourceClaims of the input", show_lines=True)
        for column in ("claim", "verdict", "devices", "used by", "why not allocated"):
            grid.add_column(column, overflow="fold")
        for claim in result.claims:
            style = "green" if claim.verdict == "allocated" else "red"
            shown = claim.name if claim.namespace.startswith("try-") else f"{claim.namespace}/{claim.name}"
            grid.add_row(shown, f"[{style}]{claim.verdict}[/{style}]", "\n".join(f"{device_text(a)} on {a.node}" for a in claim.allocations),
                         ", ".join(claim.pods), "\n".join(claim.reasons))
        console.print(grid)
    if result.device_classes:
        grid = Table(title="DeviceClasses of the input", show_lines=True)
        for column in ("class", "devices it selects", "problem"):
            grid.add_column(column, overflow="fold")
        for device_class in result.device_classes:
            boards = ", ".join(f"{n} on {b}" for b, n in device_class.boards.items())
            grid.add_row(device_class.name, f"{device_class.devices}" + (f" ({boards})" if boards else ""), device_class.problem or "")
        console.print(grid)


def remarks(result: RunResult) -> list[str]:
    """Field warnings and notes, one line each."""
    return [f"warning: {w}" for w in result.warnings] + [f"note: {n}" for n in result.notes]


def summary(result: RunResult) -> str:
    placed = sum(p.verdict == "scheduled" for p in result.pods)
    legacy = [p for p in result.pods if p.legacy]
    parts = [f"{placed} of {len(result.pods)} pods scheduled on {result.fleet}"]
    if legacy:
        parts.append(f"{sum(p.verdict == 'scheduled' for p in legacy)} of {len(legacy)} legacy (nvidia.com/gpu-style) pods run unchanged")
    if result.claims:
        parts.append(f"{sum(c.verdict == 'allocated' for c in result.claims)} of {len(result.claims)} ResourceClaims of the input allocated")
    if result.warnings:
        parts.append(f"{len(result.warnings)} field warning{'s' if len(result.warnings) > 1 else ''}")
    if not result.settled:
        parts.append(f"scheduling did not settle within {result.seconds:.0f}s")
    return "; ".join(parts)


def compare_rows(a: RunResult, b: RunResult) -> list[tuple[str, PodOutcome | None, PodOutcome | None]]:
    """Pods matched across fleets by their stable label."""
    left = {label: pod for pod in a.pods for label in [labels(a, stable=True)[id(pod)]]}
    right = {label: pod for pod in b.pods for label in [labels(b, stable=True)[id(pod)]]}
    return [(label, left.get(label), right.get(label)) for label in sorted({*left, *right})]


def compare_table(a: RunResult, b: RunResult, console: Console) -> None:
    """Two fleets side by side; rows where the verdict differs are marked."""
    grid = Table(title=f"{a.fleet} vs {b.fleet}", show_lines=True)
    for column in ("pod", a.fleet, b.fleet, "change"):
        grid.add_column(column, overflow="fold")
    for label, left, right in compare_rows(a, b):
        grid.add_row(label, _cell(left), _cell(right), change(left, right))
    console.print(grid)
    for result in (a, b):
        console.print(summary(result))
        for line in remarks(result):
            console.print(f"{result.fleet}: {line}", markup=False, highlight=False)


def evolution_table(results: Sequence[RunResult], console: Console) -> None:
    """Three or more fleets in order: a column per fleet and a change column per step, then a tally per step."""
    grid = Table(title=" -> ".join(r.fleet for r in results), show_lines=True)
    grid.add_column("pod", overflow="fold")
    for i, result in enumerate(results):
        grid.add_column(result.fleet, overflow="fold")
        if i:
            grid.add_column(f"{results[i - 1].fleet} -> {result.fleet}", overflow="fold")
    rows = evolution_rows(results, labels)
    for row in rows:
        cells = [_cell(row.pods[0])]
        for pod, moved in zip(row.pods[1:], row.steps):
            cells += [_cell(pod), moved.text if moved.kind != "keeps" else f"[dim]{moved.text}[/dim]"]
        grid.add_row(row.label, *cells)
    console.print(grid)
    for line in step_tally(rows, results):
        console.print(line, markup=False, highlight=False)
    for result in results:
        console.print(summary(result))


def change(left: PodOutcome | None, right: PodOutcome | None) -> str:
    before = left.verdict if left else "absent"
    after = right.verdict if right else "absent"
    if before != after:
        return f"{before} -> {after}"
    if left and right and left.board != right.board:
        return f"moves {left.board} -> {right.board}"
    return ""


def _cell(pod: PodOutcome | None) -> str:
    if pod is None:
        return ""
    if pod.verdict == "scheduled":
        return f"[green]{pod.node}[/green] ({pod.board})\n" + "\n".join(device_text(a) for a in pod.allocations)
    return f"[red]{pod.verdict}[/red]" + ("".join(f"\n{line}" for line in pod.reasons[:2]))


def as_json(results: Sequence[RunResult]) -> str:
    if len(results) == 1:
        return json.dumps(results[0].as_dict(), indent=2)
    if len(results) > 2:
        rows = evolution_rows(results, labels)
        evolution = [{"pod": row.label, "fleets": [pod.as_dict() if pod else None for pod in row.pods],
                      "steps": [{"kind": s.kind, "text": s.text} for s in row.steps]} for row in rows]
        return json.dumps({"fleets": [r.as_dict() for r in results], "evolution": evolution,
                           "steps": step_tally(rows, results)}, indent=2)
    a, b = results
    rows = [{"pod": label, "a": left.as_dict() if left else None, "b": right.as_dict() if right else None,
             "change": change(left, right)} for label, left, right in compare_rows(a, b)]
    return json.dumps({"fleets": [r.as_dict() for r in results], "compare": rows}, indent=2)


def as_html(results: Sequence[RunResult], title: str) -> str:
    """The report page: one section per fleet, and the comparison when there are two or more (a change per step)."""
    fleets = []
    for result in results:
        names = labels(result)
        fleets.append({"result": result, "summary": summary(result), "remarks": remarks(result), "rows": [
            {"label": names[id(p)], "pod": p, "placement": placement(p), "devices": [device_text(a) for a in p.allocations],
             "legacy": legacy_text(p), "why": why(p)} for p in result.pods],
            "claims": [{"claim": c, "shown": c.name if c.namespace.startswith("try-") else f"{c.namespace}/{c.name}",
                        "devices": [f"{device_text(a)} on {a.node}" for a in c.allocations]} for c in result.claims],
            "classes": [{"class": d, "boards": ", ".join(f"{n} on {b}" for b, n in d.boards.items())} for d in result.device_classes]})
    comparison = None
    if len(results) == 2:
        comparison = [{"label": label, "cells": [left and placement(left), right and placement(right)],
                       "changes": [change(left, right)]} for label, left, right in compare_rows(*results)]
    elif len(results) > 2:
        comparison = [{"label": row.label, "cells": [pod and placement(pod) for pod in row.pods],
                       "changes": [s.text for s in row.steps]} for row in evolution_rows(results, labels)]
    return render_html("outcomes.html.j2", title=title, fleets=fleets, comparison=comparison)
