"""The campaign's table and its judgement: clean runs show zero, fault runs more than zero, verdicts unmoved by kills."""

from __future__ import annotations

from testbed.campaign.chaos import COMPONENTS
from testbed.campaign.run import CampaignResult

# fault switch -> the category its runs must report
CAUGHT_AS = {"unprepare-leaks": "leak", "counters-undeclared": "double-allocation"}


def table(runs: dict[str, CampaignResult]) -> str:
    head = ["run", "faults", "kills", *COMPONENTS, "crashes", "pods", "claims", "leaks", "double", "seeds", "verdicts", "retries", "wall s"]
    rows = [head]
    for label, r in runs.items():
        passed = sum(s.verdict == "pass" for s in r.seeds)
        rows.append([label, ",".join(r.faults) or "-", str(len(r.kills)), *(str(r.kills_by_component.get(c, 0)) for c in COMPONENTS),
                     str(sum(r.crashes.values())), str(r.stats.get("pods", 0)), str(r.stats.get("claims", 0)), str(r.leaks),
                     str(r.double_allocations), ",".join(str(s.seed) for s in r.seeds), f"{passed} pass / {len(r.seeds) - passed} fail",
                     str(r.retries), f"{r.wall:.0f}"])
    widths = [max(len(row[i]) for row in rows) for i in range(len(head))]
    lines = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)) for row in rows]
    for label, r in runs.items():
        for s in r.seeds:
            if s.verdict != "pass":
                lines.append(f"  {label} seed {s.seed}: {s.verdict}: {(s.messages or [''])[0][:200]}")
        if r.gpu_failures:  # GPUs failed and healed beside the kills (testbed/campaign/gpu_failures.py)
            lines.append(f"  {label}: GPU failures {r.gpu_failures}")
        for e in r.unrecovered + r.errors:
            lines.append(f"  {label}: {e}")
        for unit, reasons in r.crash_reasons.items():
            lines.append(f"  {label}: {unit} exited {r.crashes.get(unit, 0)} times unasked; last errors: {' | '.join(reasons)[:300]}")
    return "\n".join(lines)


def judge(runs: dict[str, CampaignResult]) -> list[str]:
    """What is wrong with a campaign's runs (empty: the campaign shows what it must). Runs are paired as
    `<x>kills` and `<x>zero kills` on the same seeds. In any run, a unit or the cluster that did not come back
    is a finding; a clean run with fewer kills than asked (the chaos stopped, the seeds ran out) proves less
    than it says."""
    problems = []
    for label, r in runs.items():
        problems += [f"{label}: {line}" for line in r.unrecovered]
        pair = label.replace("zero kills", "kills") if label.endswith("zero kills") else label.removesuffix("kills") + "zero kills"
        if pair not in runs:  # judged only against its pair: alone it would pass whatever it found
            problems.append(f"{label}: no run {pair!r} to compare it with")
        if not r.faults and len(r.kills) < r.kills_asked:
            problems.append(f"{label}: {len(r.kills)} of the {r.kills_asked} kills asked were done")
    for label, r in runs.items():
        if not label.endswith("zero kills"):
            continue
        chaos = runs.get(label.replace("zero kills", "kills"))
        if chaos is None:
            continue
        fault = chaos.faults[0] if chaos.faults else None
        if fault is None:
            for run_label, run in ((label.replace("zero kills", "kills"), chaos), (label, r)):
                if run.leaks or run.double_allocations or any(s.verdict != "pass" for s in run.seeds):
                    problems.append(f"{run_label}: a clean run found leaks {run.leaks}, double allocations {run.double_allocations}, "
                                    f"verdicts {run.verdicts()}")
            if chaos.verdicts() != r.verdicts():
                problems.append(f"{label}: verdicts differ from the run with kills: {chaos.verdicts()} vs {r.verdicts()}")
            moved = [s.seed for s, z in zip(chaos.seeds, r.seeds) if s.workload != z.workload]
            if moved:
                problems.append(f"{label}: seeds {moved} ran other workloads than with kills")
        else:
            wanted = CAUGHT_AS[fault]
            for run_label, run in ((label.replace("zero kills", "kills"), chaos), (label, r)):
                count = run.leaks if wanted == "leak" else run.double_allocations
                if not count:
                    problems.append(f"{run_label}: the fault {fault} went unnoticed (0 {wanted})")
            # Per-seed agreement is asked of clean runs only: with a fault on, kills move the timing, and
            # which seeds happen to hit the fault may move with it (seen: a double allocation caught on
            # seeds 0 and 1 without kills, on seed 0 with kills). What counts is that both runs see it.
    return problems
