"""`dra-testbed try MANIFESTS... --fleet LAYOUT`: will these manifests schedule on this fleet, and where?

Brings up (or reuses) a KWOK test bed shaped like the fleet, applies the manifests as they are, waits
until scheduling settles and reports per pod; `--compare LAYOUT_B` does the same on a second fleet and
shows both side by side; more fleets (`--compare B,C,D` or the flag repeated) are shown in order with a change
column per step (hardware evolution: A100 -> H100 -> B200 -> B300). Exit 0 when every pod is scheduled (or annotated dra-testbed.io/may-pend),
1 when one stays pending, 2 on bad input.
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rich.console import Console

from hostenv.versions import DEFAULT_MINOR
from testbed.cli.arguments import minor
from testbed.clusters.base import ClusterSpec
from testbed.cli.driver_option import add_driver_options
from testbed.clusters.driver import OURS, DriverSpec
from testbed.clusters.layout import Layout
from testbed.errors import BadInputError

OUTPUTS = ("table", "json", "html")


class TryUsageError(BadInputError):
    """Bad input to `try`: one line, exit 2."""


def resolve_fleet(text: str) -> Layout:
    """A layout file, or the name of one in clusters/layouts/ (e.g. `mixed-h100-b200`)."""
    from testbed.outcomes.layouts import named_layout

    return named_layout(text)


def bed_name(layout: Layout, minor: str, driver: DriverSpec) -> str:
    """The test bed a fleet gets: one per layout, minor and driver, so a later `try` can reuse it."""
    base = re.sub(r"[^a-z0-9-]+", "-", layout.name.lower()).strip("-")[:30] or "fleet"
    return f"try-{base}-{minor.replace('.', '')}" + ("" if driver.driver == OURS else f"-{driver.driver}")


def driver_spec(args: argparse.Namespace) -> DriverSpec:
    """The driver the options name, refused in one line (TryUsageError) when the KWOK backend cannot run it."""
    from testbed.cli.driver_option import driver_from_args
    from testbed.clusters.driver import DriverSpecError
    from testbed.clusters.kwok.driver import kwok_driver

    try:
        spec = driver_from_args(args)
        kwok_driver(spec)
    except DriverSpecError as exc:
        raise TryUsageError(f"--driver {args.driver}: {exc}") from exc
    return spec


def cluster_spec(name: str, minor: str, layout: Layout, driver: DriverSpec) -> ClusterSpec:
    """The spec of the bed; `driver` goes through ClusterSpec's driver seam."""
    return ClusterSpec(name=name, k8s=minor, layout=layout, driver=driver)


@contextmanager
def test_bed(spec: ClusterSpec, keep: bool) -> Iterator:
    """A running KWOK bed of `spec`: reused when one of that name and shape runs, else brought up (replacing
    one of another shape). A bed brought up here is torn down afterwards unless `keep`; a reused bed is left
    as found."""
    from testbed.beds import bed_session

    with bed_session(spec, "kwok", reuse=True, replace_mismatch=True, keep=keep) as bed:
        yield bed.api


def run_on_fleet(manifests, layout: Layout, args: argparse.Namespace):
    from testbed.outcomes.run import run_manifests

    driver = driver_spec(args)
    spec = cluster_spec(bed_name(layout, args.k8s, driver), args.k8s, layout, driver)
    with test_bed(spec, args.keep) as api:
        return run_manifests(api, manifests, fleet=layout.name, minor=args.k8s, timeout=args.timeout, strict=args.strict)


def rendered_inputs(args: argparse.Namespace) -> list:
    """The kustomizations (-k) and the Helm chart (--helm) the options name; rendered when the manifests load."""
    from hostenv.versions import release_for
    from testbed.outcomes.inputs import HelmChart, Kustomization

    found: list = [Kustomization(Path(directory)) for directory in args.kustomize]
    if args.helm:
        found.append(HelmChart(Path(args.helm), tuple(Path(v) for v in args.values), tuple(args.set), args.release,
                               release_for(args.k8s).kubernetes))
    elif args.values or args.set:
        raise TryUsageError("--values and --set are a Helm chart's: give the chart with --helm CHART")
    return found


def compared(values: list[str] | None) -> list[str]:
    """The fleets of every --compare, in order: each flag takes one layout or a comma-separated list."""
    names = [name.strip() for value in values or () for name in value.split(",")]
    if any(not name for name in names):
        raise TryUsageError(f"--compare {','.join(values or ())}: an empty fleet name; valid: layout files or names in clusters/layouts/, comma-separated")
    return names


def distinct_names(fleets: list[Layout]) -> list[Layout]:
    """A fleet named like an earlier one gets a letter (`h100-only-b`): its bed and its report column are its own."""
    seen: set[str] = set()
    out = []
    for index, layout in enumerate(fleets):
        if layout.name in seen:
            layout = dataclasses.replace(layout, name=f"{layout.name}-{chr(ord('a') + index)}")
        seen.add(layout.name)
        out.append(layout)
    return out


def cmd_try(args: argparse.Namespace) -> int:
    from testbed.outcomes import render
    from testbed.outcomes.layouts import fleet_layout
    from testbed.outcomes.manifests import ManifestError, load

    try:
        manifests = load([*args.manifests, *args.filename, *rendered_inputs(args)], args.recursive)
        fleets = [fleet_layout(args.fleet, args.node)] + [resolve_fleet(name) for name in compared(args.compare)]
        fleets = distinct_names(fleets)
        driver_spec(args)  # the driver seam, before anything starts
        results = [run_on_fleet(manifests, layout, args) for layout in fleets]
    except (ManifestError, TryUsageError) as exc:
        print(f"dra-testbed try: error: {exc}", file=sys.stderr)
        return 2
    if args.output == "json":
        print(render.as_json(results))
    elif args.output == "html":
        title = "Will it schedule? " + " vs ".join(r.fleet for r in results)
        text = render.as_html(results, title)
        if args.report:
            Path(args.report).write_text(text)
        else:
            print(text)
    else:
        console = Console(width=args.width) if args.width else Console()
        if len(results) == 2:
            render.compare_table(*results, console)
        elif len(results) > 2:
            render.evolution_table(results, console)
        else:
            render.table(results[0], console)
    if args.report and args.output != "html":
        Path(args.report).write_text(render.as_html(results, "Will it schedule? " + " vs ".join(r.fleet for r in results)))
    return 0 if all(r.ok for r in results) else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `try` subcommand to the `dra-testbed` parser."""
    p = sub.add_parser("try", help="will these manifests schedule on this fleet? apply them on a test bed and explain each pod")
    p.add_argument("manifests", nargs="*", metavar="MANIFEST", help="YAML files or directories of them (- for standard input)")
    p.add_argument("-f", "--filename", action="append", default=[], metavar="FILE|DIR|-", help="as kubectl -f: a file, a directory, or - (standard input); repeatable")
    p.add_argument("-R", "--recursive", action="store_true", help="read directories' subdirectories too (as kubectl -R)")
    p.add_argument("-k", "--kustomize", action="append", default=[], metavar="DIR", help="as kubectl -k: what `kustomize build DIR` writes; repeatable")
    p.add_argument("--helm", metavar="CHART", help="what `helm template` renders from this chart (a directory or .tgz), offline")
    p.add_argument("--values", action="append", default=[], metavar="FILE", help="a values file for --helm; repeatable")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE", help="a value for --helm, as helm --set; repeatable")
    p.add_argument("--release", default="try", metavar="NAME", help="the release name --helm renders with (default try)")
    p.add_argument("--strict", action="store_true", help="refuse unknown and duplicate fields (exit 2, nothing created) instead of warning")
    p.add_argument("--fleet", help="layout file or name in clusters/layouts/ (e.g. mixed-h100-b200)")
    p.add_argument("--node", action="append", default=[], metavar="NAME=BOARD:COUNT:MODE", help="a GPU node of the fleet, as `up` takes it (instead of --fleet); repeatable")
    p.add_argument("--compare", action="append", metavar="LAYOUT_B[,LAYOUT_C...]",
                   help="also run on this fleet and show both side by side; several (comma-separated or repeated): in order, a change column per step")
    p.add_argument("--k8s", type=minor, default=DEFAULT_MINOR, help=f"Kubernetes minor (default {DEFAULT_MINOR})")
    add_driver_options(p, what="the DRA driver publishing the devices")
    p.add_argument("--output", "-o", choices=OUTPUTS, default="table", help="table (default), json or html")
    p.add_argument("--report", metavar="FILE", help="also write the HTML report to FILE")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for scheduling to settle (default 120)")
    p.add_argument("--keep", action="store_true", help="leave the test bed running for the next try (the applied objects are always removed)")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_try)
