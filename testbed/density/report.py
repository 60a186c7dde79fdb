"""A density report: the table per mode on the console, density.json, PNG plots and an HTML page."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Sequence

from rich.console import Console
from rich.table import Table

from testbed.density.metrics import as_dicts, summary
from testbed.density.replay import ModeRun
from testbed.density.trace import Trace
from testbed.templates import render_template

COLUMNS = (
    ("placed", "placed"), ("never_placed", "never placed"), ("peak_gpus_in_use", "GPUs needed (peak in use)"),
    ("mean_gpus_in_use", "GPUs in use (mean)"), ("peak_pending", "peak pending"),
    ("mean_stranded_compute", "stranded compute (GPUs, mean)"), ("mean_stranded_memory_gib", "stranded memory (GiB, mean)"),
    ("tts_p50", "time to schedule p50 (s)"), ("tts_p90", "p90 (s)"), ("tts_max", "max (s)"),
)
PLOTS = (
    ("placed", "pods placed", "placed.png"),
    ("pending", "pods pending", "pending.png"),
    ("gpus_in_use", "GPUs in use", "gpus.png"),
    ("stranded_compute", "stranded compute (GPUs)", "stranded-compute.png"),
    ("stranded_memory_gib", "stranded memory (GiB)", "stranded-memory.png"),
)


def document(trace: Trace, fleet_name: str, gpus: int, k8s: str, window: int, runs: Sequence[ModeRun],
             scheduler_profile: str = "default") -> dict:
    """Everything the report shows, as density.json holds it."""
    return {
        "trace": str(trace.path), "gpu_pods": len(trace.pods), "cpu_only_pods_left_out": trace.cpu_only,
        "pods_with_gpu_spec": trace.with_gpu_spec, "timestamps": trace.timed, "window": None if trace.timed else window,
        "fleet": fleet_name, "fleet_gpus": gpus, "kubernetes": k8s, "scheduler_profile": scheduler_profile,
        "modes": {r.mode: {"summary": summary(r.samples, r.pods), "wall_seconds": r.wall_seconds, "unsettled": r.unsettled,
                           "samples": as_dicts(r.samples), "pods": as_dicts(r.pods)} for r in runs},
    }


def print_table(doc: dict, console: Console | None = None) -> None:
    table = Table(title=f"{Path(doc['trace']).name}: {doc['gpu_pods']} GPU pods on {doc['fleet']} ({doc['fleet_gpus']} GPUs), "
                        f"Kubernetes {doc['kubernetes']}, {doc.get('scheduler_profile', 'default')} scheduler profile")
    table.add_column("mode")
    for _, title in COLUMNS:
        table.add_column(title, justify="right")
    for mode, data in doc["modes"].items():
        table.add_row(mode, *("-" if data["summary"][key] is None else str(data["summary"][key]) for key, _ in COLUMNS))
    (console or Console()).print(table)


def _plots(doc: dict, directory: Path) -> list[tuple[str, str]]:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    written = []
    for key, title, file in PLOTS:
        figure, axes = pyplot.subplots(figsize=(8, 3.2), dpi=100)
        for mode, data in doc["modes"].items():
            axes.plot([s["event"] for s in data["samples"]], [s[key] for s in data["samples"]], label=mode, linewidth=1)
        axes.set_xlabel("trace event (arrivals and departures in trace order)")
        axes.set_ylabel(title)
        axes.legend(fontsize=8)
        figure.tight_layout()
        figure.savefig(directory / file)
        pyplot.close(figure)
        written.append((title, file))
    figure, axes = pyplot.subplots(figsize=(8, 3.2), dpi=100)
    for mode, data in doc["modes"].items():
        waits = sorted(p["seconds_to_schedule"] for p in data["pods"] if p["seconds_to_schedule"] is not None)
        if waits:
            axes.plot(waits, [(i + 1) / len(data["pods"]) for i in range(len(waits))], label=mode, linewidth=1)
    axes.set_xscale("symlog", linthresh=0.1)
    axes.set_xlabel("time to schedule (s)")
    axes.set_ylabel("share of pods placed")
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(directory / "time-to-schedule.png")
    pyplot.close(figure)
    return written + [("time to schedule", "time-to-schedule.png")]


def write_report(doc: dict, directory: Path) -> Path:
    """density.json, the PNGs and index.html in `directory`; returns the HTML page's path."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "density.json").write_text(json.dumps(doc, indent=1) + "\n")
    plots = _plots(doc, directory)
    page = directory / "index.html"
    page.write_text(render_template("density.html.j2", doc=doc, columns=COLUMNS, plots=plots, trace_name=Path(doc["trace"]).name))
    return page
