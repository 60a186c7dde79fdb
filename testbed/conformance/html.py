"""report.html: one self-contained page - the verdict, the table of checks, each failure with its evidence, plots."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Sequence

import jinja2

from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN, PASS, Outcome
from testbed.conformance.verdict import verdict

COLOURS = {PASS: "#2e7d32", FAIL: "#c62828", ERROR: "#6a1b9a", NOT_RUN: "#9e9e9e"}
EVIDENCE_PREVIEW = 4000  # characters of each evidence file shown inline


def _png(fig) -> str:
    buffer = io.BytesIO()
    fig.savefig(buffer, format="png", dpi=90, bbox_inches="tight")
    return base64.b64encode(buffer.getvalue()).decode()


def duration_plot(outcomes: Sequence[Outcome]) -> str:
    """Seconds per check, coloured by verdict, as a base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")  # headless: no display on CI machines
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.28 * len(outcomes) + 1))
    try:
        ax.barh([o.id for o in outcomes], [o.duration for o in outcomes], color=[COLOURS[o.verdict] for o in outcomes])
        ax.invert_yaxis()
        ax.set_xlabel("seconds")
        ax.set_title("duration per check (colour: verdict)")
        return _png(fig)
    finally:
        plt.close(fig)


def probe_latencies(directory: Path, outcomes: Sequence[Outcome]) -> dict[str, list[float]]:
    """Seconds from applying each probe pod to the scheduler's decision, per check (from its probes.json)."""
    found: dict[str, list[float]] = {}
    for o in outcomes:
        for name in o.evidence:
            if not name.endswith("probes.json"):
                continue
            try:
                probes = json.loads((directory / name).read_text())
            except (OSError, ValueError):
                continue
            found[o.id] = [p["seconds"] for p in probes.values() if isinstance(p, dict) and "seconds" in p]
    return {k: v for k, v in found.items() if v}


def latency_plot(latencies: dict[str, list[float]]) -> str:
    """Each scheduling probe's time to a decision, one row per check, as a base64 PNG."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 0.35 * len(latencies) + 1))
    try:
        for row, (check, seconds) in enumerate(latencies.items()):
            ax.scatter(seconds, [row] * len(seconds), color="#1565c0")
        ax.set_yticks(range(len(latencies)), list(latencies))
        ax.invert_yaxis()
        ax.set_xlabel("seconds from apply to the scheduler's decision")
        ax.set_title("scheduling probes")
        return _png(fig)
    finally:
        plt.close(fig)


def node_side(directory: Path, outcomes: Sequence[Outcome]) -> dict | None:
    """What node.generated compared (its node-side.json), if it ran."""
    for o in outcomes:
        for name in o.evidence:
            if name.endswith("node.generated/node-side.json"):
                try:
                    return json.loads((directory / name).read_text())
                except (OSError, ValueError):
                    return None
    return None


def node_side_plot(data: dict) -> str | None:
    """The generated run on the nodes: MIG devices seen and allocated per watched node after each step, and each
    pod's time from its binding to running, as a base64 PNG (None when there is nothing to show)."""
    if not data.get("occupancy") and not data.get("pods"):
        return None
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    fig, (occupancy, start) = plt.subplots(1, 2, figsize=(10, 3))
    try:
        for node in sorted({o["node"] for o in data.get("occupancy") or []}):
            points = [o for o in data["occupancy"] if o["node"] == node]
            occupancy.step([p["check"] for p in points], [p["seen"] for p in points], where="post", label=f"{node}: seen (NVML)")
            occupancy.plot([p["check"] for p in points], [p["allocated"] for p in points], "o", label=f"{node}: allocated to running pods")
        occupancy.set_xlabel("step (node check)")
        occupancy.set_ylabel("MIG devices")
        occupancy.set_title("partition occupancy over the generated run")
        if data.get("occupancy"):
            occupancy.legend(fontsize=7)
        seconds = [p["start_s"] for p in data.get("pods") or [] if "start_s" in p]
        start.hist(seconds, bins=max(1, min(20, len(seconds))), color="#1565c0")
        start.set_xlabel("seconds from binding seen to running (prepare + container start)")
        start.set_title(f"{len(seconds)} pods")
        return _png(fig)
    finally:
        plt.close(fig)


def _evidence(directory: Path, outcome: Outcome) -> list[dict]:
    shown = []
    for name in outcome.evidence:
        try:
            text = (directory / name).read_text(errors="replace")
        except OSError:
            continue
        shown.append({"name": name, "text": text[:EVIDENCE_PREVIEW], "cut": len(text) > EVIDENCE_PREVIEW})
    return shown


def render_html(directory: Path, outcomes: Sequence[Outcome], info) -> str:
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(Path(__file__).resolve().parent.parent / "templates"),
                             autoescape=True, undefined=jinja2.StrictUndefined)
    failures = [{"outcome": o, "evidence": _evidence(directory, o)} for o in outcomes if o.verdict in (FAIL, ERROR)]
    return env.get_template("conformance.html.j2").render(
        verdict=verdict(outcomes), outcomes=outcomes, failures=failures, info=info, colours=COLOURS,
        counts={v: sum(o.verdict == v for o in outcomes) for v in (PASS, FAIL, ERROR, NOT_RUN)},
        plot=duration_plot(outcomes) if outcomes else None, seeds=json.dumps(info.seeds, sort_keys=True),
        latency=latency_plot(latencies) if (latencies := probe_latencies(directory, outcomes)) else None,
        node_side=node_side_plot(data) if (data := node_side(directory, outcomes)) else None)
