"""`try --compare B,C,D`: the N-fleet table from RunResults, per pod what each step does, and the two-fleet output
left as it was."""

from __future__ import annotations

import json

from rich.console import Console

from testbed.outcomes.explain import PodOutcome
from testbed.outcomes.render import as_html, as_json, compare_table, evolution_table
from testbed.outcomes.run import RunResult

FLEETS = ("fleet-a100", "fleet-h100", "fleet-b200", "fleet-b300")
A100_ONLY = "no gpu.nvidia.com device matches: productName == 'NVIDIA A100-SXM4-80GB'"


def _placed(node: str, board: str) -> dict:
    return {"verdict": "scheduled", "node": node, "board": board}


def _pending(reason: str) -> dict:
    return {"verdict": "pending", "reasons": [reason]}


# Per pod, its outcome on each fleet: one keeps nothing (moves each generation), one asks for an A100 by name
# (starts pending on H100, stays pending), one asks for >100Gi (pending until B200, then moves to B300).
OUTCOMES = {
    "whole": [_placed("a100-whole", "a100-80gb"), _placed("h100-whole", "h100-80gb"), _placed("b200-whole", "b200-180gb"),
              _placed("b300-whole", "b300-288gb")],
    "a100-by-name": [_placed("a100-whole", "a100-80gb"), _pending(A100_ONLY), _pending(A100_ONLY), _pending(A100_ONLY)],
    "big": [_pending("largest memory is 79.0Gi on a100-80gb"), _pending("largest memory is 79.2Gi on h100-80gb"),
            _placed("b200-whole", "b200-180gb"), _placed("b300-whole", "b300-288gb")],
    "same": [_placed("mixed", "h100-80gb"), _placed("mixed", "h100-80gb"), _placed("mixed", "h100-80gb"), _placed("mixed", "h100-80gb")],
}


def results(fleets: tuple[str, ...] = FLEETS) -> list[RunResult]:
    out = []
    for i, fleet in enumerate(fleets):
        pods = [PodOutcome("try-1", name, "", **outcome[i]) for name, outcome in OUTCOMES.items()]
        out.append(RunResult(fleet, "1.34", "v1.34.4", pods=pods))
    return out


def test_json_has_a_step_per_fleet_pair_with_the_reason() -> None:
    report = json.loads(as_json(results()))
    rows = {row["pod"]: row for row in report["evolution"]}
    assert [r["fleet"] for r in report["fleets"]] == list(FLEETS)
    assert [s["text"] for s in rows["whole"]["steps"]] == [
        "moves a100-80gb -> h100-80gb", "moves h100-80gb -> b200-180gb", "moves b200-180gb -> b300-288gb"]
    assert [s["kind"] for s in rows["a100-by-name"]["steps"]] == ["starts pending", "stays pending", "stays pending"]
    assert rows["a100-by-name"]["steps"][0]["text"] == f"starts pending: {A100_ONLY}"
    assert [s["text"] for s in rows["big"]["steps"]] == [
        "stays pending: largest memory is 79.2Gi on h100-80gb", "schedules on b200-180gb", "moves b200-180gb -> b300-288gb"]
    assert [s["kind"] for s in rows["same"]["steps"]] == ["keeps"] * 3
    assert report["steps"][0] == "fleet-a100 -> fleet-h100: 1 keeps, 1 moves, 1 starts pending, 1 stays pending"


def test_table_has_a_column_per_fleet_and_per_step() -> None:
    console = Console(width=400, record=True)
    evolution_table(results(), console)
    text = console.export_text()
    header = next(line for line in text.splitlines() if "fleet-a100" in line and "pod" in line)
    columns = [c.strip() for c in header.strip("┃│ ").replace("┃", "│").split("│")]
    assert columns == ["pod", "fleet-a100", "fleet-h100", "fleet-a100 -> fleet-h100", "fleet-b200", "fleet-h100 -> fleet-b200",
                       "fleet-b300", "fleet-b200 -> fleet-b300"]
    assert "starts pending: no gpu.nvidia.com device" in text  # the reason, folded over lines in its cell
    assert "fleet-b200 -> fleet-b300: 1 keeps, 2 moves, 1 stays pending" in text


def test_html_comparison_has_every_fleet_and_step() -> None:
    page = as_html(results(), "evolution")
    assert page.count("<th>fleet-a100 -&gt; fleet-h100</th>") == 1 and "<th>fleet-b200 -&gt; fleet-b300</th>" in page
    assert "schedules on b200-180gb" in page


def test_two_fleets_keep_their_side_by_side_output() -> None:
    """The two-fleet table, JSON and HTML are those of before the N-fleet table: one change column, a/b keys."""
    two = results(FLEETS[:2])
    report = json.loads(as_json(two))
    assert set(report) == {"fleets", "compare"} and set(report["compare"][0]) == {"pod", "a", "b", "change"}
    assert {r["pod"]: r["change"] for r in report["compare"]}["a100-by-name"] == "scheduled -> pending"
    console = Console(width=300, record=True)
    compare_table(*two, console)
    header = next(line for line in console.export_text().splitlines() if "pod" in line)
    assert [c.strip() for c in header.strip("┃│ ").replace("┃", "│").split("│")] == ["pod", "fleet-a100", "fleet-h100", "change"]
    page = as_html(two, "two")
    assert "<th>change</th>" in page and "-&gt;" not in page.split("<th>change</th>")[0].split("<table>")[1]
