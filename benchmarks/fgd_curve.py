"""Benchmark: the FGD experiment's curve (Weng et al., USENIX ATC '23) on a KWOK fleet cut from the trace's own
cluster: pods arrive in trace order and never leave, and after each arrival the unallocated-GPU percentage
is plotted against the workload arrived so far, per mode, through the real kube-scheduler and our driver.

- Fleet: every `--every`-th node of openb_node_list_gpu_node.csv (1,213 nodes, 6,212 GPUs; --every 1 is the
  whole cluster), each an H100 80GB node with the trace node's GPU count (1, 2, 4 or 8). The trace's models
  (P100, T4, V100, G2, G3, A10) differ in speed and memory, which the trace's shares do not express (a share
  is of whichever GPU the pod ran on), so one board keeps a share meaning the same fraction everywhere.
- Pods: openb_pod_list_default.csv's GPU pods in file order, arrivals only, until their demand reaches
  `--fill` times the fleet's GPUs (the rest would only wait).
- Arrived workload = the demand (num_gpu * gpu_milli / 1000) of the pods arrived, as % of the fleet's GPUs.
  Unallocated GPUs = the fleet's GPUs minus the demand of the pods placed, as % of the fleet's GPUs: what
  no placed pod uses, free GPUs and what partitions or shares leave over on busy ones alike (the paper's
  measure counts GPU capacity not allocated to tasks the same way).
- The paper's headline (up to 49% fewer unallocated GPUs than packing baselines, in its simulator) is drawn
  as a reference note beside the curves, never as our result; we have no FGD scheduler.

Each mode is printed with its unallocated share after the last arrival as a ratio to the first mode's (the baseline).
At the full size every mode publishes 6,212 GPUs' slices and prepares on the stand-in kubelet, which starts a
plugin process of about 72 MiB per node holding claims: the full 1,213 nodes need the one-process-for-many-
nodes plugin (another change); until then run it with --every 10 or more.

    python benchmarks/fgd_curve.py [--every 20] [--modes whole,dynamic-mig,whole:shares=memory] [--k8s 1.35]
                                   [--fill 1.1] [--out reports/fgd]
"""

from __future__ import annotations

import argparse
import csv
import json
import resource
import sys
import time
from pathlib import Path

from fake_gpus.node import Mode
from testbed.clusters.layout import Layout, NodeSpec, parse_mode
from testbed.density.replay import ModeRun, run_mode
from testbed.density.trace import Trace, TracePod, load_trace
from hostenv.dirs import shared_inputs

DATA = shared_inputs() / "data" / "alibaba-gpu-v2023"
BOARD = "h100-80gb"
PAPER_NOTE = "FGD paper (simulator, its own fleet): up to 49% fewer unallocated GPUs than packing baselines"


def trace_fleet(every: int) -> Layout:
    """Every `every`-th node of the trace's cluster as an H100 node of the same GPU count."""
    with (DATA / "openb_node_list_gpu_node.csv").open(newline="") as handle:
        rows = list(csv.DictReader(handle))[::every]
    nodes = tuple(NodeSpec(f"openb-{i:04d}", BOARD, int(row["gpu"]), Mode("whole")) for i, row in enumerate(rows))
    return Layout(nodes, name=f"openb-every-{every}")


def arrivals(fleet_gpus: int, fill: float) -> Trace:
    """The default list's GPU pods in order, arriving one per tick and never leaving, up to `fill` x the fleet."""
    full = load_trace(DATA / "openb_pod_list_default.csv")
    pods, demand = [], 0.0
    for pod in full.pods:
        if demand >= fill * fleet_gpus:
            break
        pods.append(TracePod(len(pods), pod.name, pod.num_gpu, pod.gpu_milli, pod.gpu_spec, created=len(pods), deleted=None))
        demand += pod.demand
    return Trace(full.path, tuple(pods), full.cpu_only, full.with_gpu_spec, timed=True)


def curve(run: ModeRun, trace: Trace, fleet_gpus: int) -> list[tuple[float, float]]:
    """(arrived workload %, unallocated GPUs %) after each arrival."""
    points, arrived = [], 0.0
    for pod, sample in zip(trace.pods, run.samples):
        arrived += pod.demand
        placed_demand = sample.gpus_in_use - sample.stranded_compute
        points.append((round(100 * arrived / fleet_gpus, 2), round(100 * (fleet_gpus - placed_demand) / fleet_gpus, 2)))
    return points


def plot(curves: dict[str, list[tuple[float, float]]], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")  # files only, no display
    from matplotlib import pyplot

    figure, axes = pyplot.subplots(figsize=(8, 4), dpi=100)
    for mode, points in curves.items():
        axes.plot([x for x, _ in points], [y for _, y in points], label=mode, linewidth=1)
    axes.text(0.02, 0.03, "reference, not ours: " + PAPER_NOTE, transform=axes.transAxes, fontsize=7, color="gray")
    axes.set_xlabel("arrived workload (% of the fleet's GPUs)")
    axes.set_ylabel("unallocated GPUs (%)")
    axes.set_title(title, fontsize=9)
    axes.legend(fontsize=8)
    figure.tight_layout()
    figure.savefig(path)
    pyplot.close(figure)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--every", type=int, default=20, help="take every N-th node of the trace's 1,213 (default 20)")
    parser.add_argument("--modes", default="whole,dynamic-mig,whole:shares=memory")
    parser.add_argument("--k8s", default="1.35", help="1.35 or newer when a mode shares GPUs")
    parser.add_argument("--fill", type=float, default=1.1, help="stop arrivals when their demand reaches this x the fleet's GPUs")
    parser.add_argument("--scheduler-profile", choices=("default", "packing"), default="default")
    parser.add_argument("--out", default="reports/fgd")
    args = parser.parse_args(argv)
    if args.every < 1 or args.fill <= 0:
        print(f"fgd_curve: --every {args.every} must be >= 1 and --fill {args.fill} above 0", file=sys.stderr)
        return 2
    fleet = trace_fleet(args.every)
    gpus = sum(n.count for n in fleet.nodes)
    trace = arrivals(gpus, args.fill)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    curves: dict[str, list[tuple[float, float]]] = {}
    table = []
    for text in args.modes.split(","):
        mode = parse_mode(text.strip(), "--modes")
        started = time.monotonic()
        run = run_mode(trace, fleet, mode, args.k8s, window=1, cluster_name="fgd",
                       scheduler_profile=args.scheduler_profile, batched=False)  # a point per arrival
        curves[str(mode)] = points = curve(run, trace, gpus)
        placed = sum(p.seconds_to_schedule is not None for p in run.pods)
        table.append({"mode": str(mode), "placed": placed, "final_unallocated_pct": points[-1][1],
                      "wall_s": round(time.monotonic() - started, 1)})
    base = table[0]["final_unallocated_pct"]
    for row in table:
        row["unallocated_vs_baseline"] = round(row["final_unallocated_pct"] / base, 3) if base else None
        print(f"{row['mode']:24} placed {row['placed']:5}  unallocated at the end {row['final_unallocated_pct']:6.2f}%  "
              f"x{row['unallocated_vs_baseline']} of {table[0]['mode']}  wall {row['wall_s']} s")
    # this process and the children it waited for (the control plane's processes are kwokctl's, not counted)
    peak = max(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
    summary = {"fleet": fleet.name, "nodes": len(fleet.nodes), "gpus": gpus, "pods": len(trace.pods), "kubernetes": args.k8s,
               "scheduler_profile": args.scheduler_profile, "paper_reference": PAPER_NOTE, "modes": table,
               "peak_rss_mib_this_process": peak // 1024, "curves": curves}
    (out / "fgd.json").write_text(json.dumps(summary, indent=1) + "\n")
    plot(curves, out / "fgd.png", f"{len(fleet.nodes)} nodes / {gpus} GPUs of the trace's cluster, {len(trace.pods)} pods in trace order")
    print(out / "fgd.png")
    return 0


if __name__ == "__main__":
    sys.exit(main())
