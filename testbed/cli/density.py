"""`dra-testbed density`: replay a GPU trace per driver mode and report how many GPUs each needs."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hostenv.versions import DEFAULT_MINOR, RELEASES
from testbed.cli.arguments import cluster_name
from testbed.cli.driver_option import add_driver_options, driver_from_args
from testbed.density.placement import PROFILES

DEFAULT_MODES = "whole,static-mig:all-balanced,dynamic-mig"
# Consumable capacity needs 1.35's allocator: 1.34.4 judges a share against the wrong device of a slice and
# can panic (suites/properties/test_sharing_machine.py, FIRST_SOUND_MINOR)
FIRST_SHARING_MINOR = (1, 35)


def parse_modes(text: str, fleet):
    """The modes of `--modes`, each checked against every board of the fleet (LayoutError, one line)."""
    from testbed.clusters.layout import LayoutError, check_layout, parse_mode
    from testbed.density.replay import fleet_in_mode

    names = [m.strip() for m in text.split(",") if m.strip()]
    if not names:
        raise LayoutError("--modes: no mode given; valid modes: whole, static-mig:<layout>, dynamic-mig")
    modes = [parse_mode(name, "--modes") for name in names]
    if len(set(map(str, modes))) != len(modes):
        raise LayoutError(f"--modes {text}: a mode is named twice")
    for mode in modes:
        check_layout(fleet_in_mode(fleet, mode))
        if mode.shares and (mode.kind != "whole" or mode.shares == "unlimited"):
            raise LayoutError(f"--modes {mode}: the density replay shares whole GPUs by memory or by N shares; "
                              f"valid sharing modes: whole:shares=memory, whole:shares=<N>")
    return modes


def check_sharing_minor(modes, k8s: str) -> str | None:
    """One line when a sharing mode is asked of a minor whose allocator misjudges shares, else None."""
    shared = [str(m) for m in modes if m.shares]
    if shared and tuple(int(p) for p in k8s.split(".")) < FIRST_SHARING_MINOR:
        return (f"--modes {shared[0]} needs --k8s 1.35 or newer (the {k8s} allocator misjudges shared devices); "
                f"valid: {', '.join(r for r in sorted(RELEASES) if tuple(map(int, r.split('.'))) >= FIRST_SHARING_MINOR)}")
    return None


def cmd_density(args: argparse.Namespace) -> int:
    from rich.console import Console

    from testbed.clusters.layout import load_layout
    from testbed.density.replay import run_mode
    from testbed.density.report import document, print_table, write_report
    from testbed.density.trace import TraceError, load_trace

    if args.window < 1:
        print(f"dra-testbed: error: --window {args.window}: must be at least 1", file=sys.stderr)
        return 2
    fleet = load_layout(args.fleet)
    modes = parse_modes(args.modes, fleet)
    wrong_minor = check_sharing_minor(modes, args.k8s)
    if wrong_minor:
        print(f"dra-testbed: error: {wrong_minor}", file=sys.stderr)
        return 2
    driver = driver_from_args(args)
    try:
        trace = load_trace(args.trace, limit=args.limit)
    except TraceError as exc:
        print(f"dra-testbed: error: {exc}", file=sys.stderr)
        return 2
    runs = []
    for mode in modes:
        runs.append(run_mode(trace, fleet, mode, args.k8s, args.window, args.name, driver=driver,
                             scheduler_profile=args.scheduler_profile))
        # written after every mode, so a mode that fails later (a cluster that does not come up) loses only itself
        doc = document(trace, fleet.name, sum(n.count for n in fleet.nodes), args.k8s, args.window, runs,
                       scheduler_profile=args.scheduler_profile)
        page = write_report(doc, Path(args.report))
    print_table(doc, Console(width=200))
    print(page)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `density` to the dra-testbed parser."""
    density = sub.add_parser("density", help="replay a GPU trace per mode on KWOK; table, density.json, plots, HTML")
    density.add_argument("--trace", required=True, help="pod list CSV (columns of the Alibaba 2023 GPU trace)")
    density.add_argument("--fleet", required=True, help="layout file of the GPU nodes (their modes are replaced by --modes)")
    density.add_argument("--modes", default=DEFAULT_MODES, help=f"comma-separated modes (default {DEFAULT_MODES})")
    density.add_argument("--report", default="density-report", help="directory for density.json, PNGs and index.html")
    density.add_argument("--name", type=cluster_name, default="density", help="name of the KWOK cluster each mode runs on (default density)")
    density.add_argument("--k8s", choices=sorted(RELEASES), default=DEFAULT_MINOR)
    density.add_argument("--limit", type=int, help="replay only the first N GPU pods")
    density.add_argument("--window", type=int, default=32, help="pods alive at once for a trace without timestamps")
    density.add_argument("--scheduler-profile", choices=PROFILES, default="default",
                         help="kube-scheduler as shipped, or packing: NodeResourcesFit MostAllocated on CPU standing for GPU shares")
    add_driver_options(density, what="the DRA driver publishing the fleet's devices")
    density.set_defaults(func=cmd_density)
