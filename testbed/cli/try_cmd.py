"""`dra-testbed try MANIFESTS... --fleet LAYOUT`: will these manifests schedule on this fleet, and where?

Brings up (or reuses) a KWOK test bed shaped like the fleet, applies the manifests as they are, waits
until scheduling settles and reports per pod; `--compare LAYOUT_B` does the same on a second fleet and
shows both side by side. Exit 0 when every pod is scheduled (or annotated dra-testbed.io/may-pend),
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
from testbed.clusters.base import ClusterSpec, spec_mismatch
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout, LayoutError, load_layout

LAYOUTS = Path(__file__).resolve().parents[2] / "clusters" / "layouts"
DRIVERS = ("ours", "nvidia")
OUTPUTS = ("table", "json", "html")


class TryUsageError(ValueError):
    """Bad input to `try`: one line, exit 2."""


def resolve_fleet(text: str) -> Layout:
    """A layout file, or the name of one in clusters/layouts/ (e.g. `mixed-h100-b200`)."""
    path = Path(text)
    if not path.is_file() and (LAYOUTS / f"{text}.yaml").is_file():
        path = LAYOUTS / f"{text}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in LAYOUTS.glob("*.yaml")))
        raise LayoutError(f"no fleet layout {text!r}: give a layout file or one of {known}")
    return load_layout(path)


def bed_name(layout: Layout, minor: str, driver: str) -> str:
    """The test bed a fleet gets: one per layout, minor and driver, so a later `try` can reuse it."""
    base = re.sub(r"[^a-z0-9-]+", "-", layout.name.lower()).strip("-")[:30] or "fleet"
    return f"try-{base}-{minor.replace('.', '')}" + ("" if driver == "ours" else f"-{driver}")


def driver_spec(driver: str) -> DriverSpec:
    """`ours`, or `nvidia`: NVIDIA's gpu-kubelet-plugin ($DRA_TESTBED_NVIDIA_PLUGIN) as a driver of kind binary.

    Refused in one line (TryUsageError) when the binary is missing or the KWOK backend cannot run it yet.
    """
    from testbed.clusters.driver import DriverSpecError
    from testbed.clusters.kwok.driver import kwok_driver
    from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary

    try:
        spec = DriverSpec() if driver == "ours" else DriverSpec("binary", path=str(plugin_binary()))
        kwok_driver(spec)
    except (PluginNotFound, DriverSpecError) as exc:
        raise TryUsageError(f"--driver {driver}: {exc}") from exc
    return spec


def cluster_spec(name: str, minor: str, layout: Layout, driver: str) -> ClusterSpec:
    """The spec of the bed; `driver` goes through ClusterSpec's driver seam (a DriverSpec)."""
    return ClusterSpec(name=name, k8s=minor, layout=layout, driver=driver_spec(driver))


def _same_shape(saved: dict | None, spec: ClusterSpec) -> bool:
    return spec.layout is not None and spec_mismatch(saved, spec) is None


@contextmanager
def test_bed(spec: ClusterSpec, keep: bool) -> Iterator:
    """A running KWOK bed of `spec`: reused when one of that name and shape runs, else brought up.

    A bed brought up here is torn down afterwards unless `keep`; a reused bed is left as found.
    """
    from testbed.clusters.registry import cluster_for

    cluster = cluster_for("kwok", spec.name)
    reused = cluster.exists() and _same_shape(cluster.saved_spec(), spec) and cluster.status().running
    if not reused:
        cluster.create(spec, force=True)
    api = cluster.api_client()
    try:
        yield api
    finally:
        api.close()
        if not (reused or keep):
            cluster.delete()


def run_on_fleet(manifests, layout: Layout, args: argparse.Namespace):
    from testbed.outcomes.run import run_manifests

    spec = cluster_spec(bed_name(layout, args.k8s, args.driver), args.k8s, layout, args.driver)
    with test_bed(spec, args.keep) as api:
        return run_manifests(api, manifests, fleet=layout.name, minor=args.k8s, timeout=args.timeout)


def cmd_try(args: argparse.Namespace) -> int:
    from testbed.outcomes import render
    from testbed.outcomes.manifests import ManifestError, load

    try:
        manifests = load(args.manifests)
        fleets = [resolve_fleet(args.fleet)] + ([resolve_fleet(args.compare)] if args.compare else [])
        if args.compare and fleets[0].name == fleets[1].name:
            fleets[1] = dataclasses.replace(fleets[1], name=f"{fleets[1].name}-b")
        cluster_spec("check", args.k8s, fleets[0], args.driver)  # the driver seam, before anything starts
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
        else:
            render.table(results[0], console)
    if args.report and args.output != "html":
        Path(args.report).write_text(render.as_html(results, "Will it schedule? " + " vs ".join(r.fleet for r in results)))
    return 0 if all(r.ok for r in results) else 1


def register(sub: argparse._SubParsersAction, minor_type) -> None:
    """Add the `try` subcommand to the `dra-testbed` parser."""
    p = sub.add_parser("try", help="will these manifests schedule on this fleet? apply them on a test bed and explain each pod")
    p.add_argument("manifests", nargs="+", metavar="MANIFEST", help="YAML files or directories of them")
    p.add_argument("--fleet", required=True, help="layout file or name in clusters/layouts/ (e.g. mixed-h100-b200)")
    p.add_argument("--compare", metavar="LAYOUT_B", help="also run on this fleet and show both side by side")
    p.add_argument("--k8s", type=minor_type, default=DEFAULT_MINOR, help=f"Kubernetes minor (default {DEFAULT_MINOR})")
    p.add_argument("--driver", choices=DRIVERS, default="ours", help="DRA driver publishing the devices (default: ours)")
    p.add_argument("--output", "-o", choices=OUTPUTS, default="table", help="table (default), json or html")
    p.add_argument("--report", metavar="FILE", help="also write the HTML report to FILE")
    p.add_argument("--timeout", type=float, default=120.0, help="seconds to wait for scheduling to settle (default 120)")
    p.add_argument("--keep", action="store_true", help="leave the test bed running for the next try (the applied objects are always removed)")
    p.add_argument("--width", type=int, default=None, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_try)
