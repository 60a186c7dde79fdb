"""`dra-testbed upstream-e2e`: Kubernetes' own DRA e2e suite against a test bed, with a per-group summary.

Builds (once per release, cached) `e2e.test`, brings up a bed (or takes --kubeconfig), counts the selected
specs with `--ginkgo.dry-run`, runs them, writes junit.xml, report.json and summary.json to --report and
prints the table. Exit 0 when every selected spec passed or failed as excepted and the totals add up,
1 otherwise, 2 on bad input.
"""

from __future__ import annotations

import argparse
import re
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from rich.console import Console

from hostenv.versions import DEFAULT_MINOR
from testbed.cli.arguments import cluster_name, minor
from testbed.cli.driver_option import add_driver_options, driver_from_args

BACKENDS = ("kwok", "kind")  # the backends whose beds run the suite's groups (see testbed/upstream/run.py)
DEFAULT_NAME = "upstream-e2e"  # never the shared default names: other sessions' beds use those
LAYOUT = Path(__file__).resolve().parents[2] / "clusters" / "layouts" / "mixed-h100-b200.yaml"


def _regex(text: str) -> str:
    try:
        re.compile(text)
    except re.error as exc:
        raise argparse.ArgumentTypeError(f"{text!r} is not a valid regular expression ({exc})")
    return text


def _count(what: str, top: int):
    def parse(text: str) -> int:
        if not text.isdigit() or not 1 <= int(text) <= top:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}; valid: 1 to {top}")
        return int(text)
    return parse


_procs = _count("a process count", 16)
_attempts = _count("a number of attempts", 5)


@contextmanager
def test_bed(backend: str, name: str, minor: str, kubeconfig: str | None, keep: bool, driver=None) -> Iterator[Path]:
    """The kubeconfig of `kubeconfig`, else of a fresh bed of the default layout, torn down afterwards unless `keep`."""
    if kubeconfig:
        yield Path(kubeconfig)
        return
    from testbed.beds import bed_session
    from testbed.clusters.base import ClusterSpec
    from testbed.clusters.driver import DriverSpec
    from testbed.clusters.layout import load_layout

    images = ()
    if backend == "kind":  # built before the bed comes up: a failed build leaves nothing running
        from testbed.upstream.images import ensure_images

        images = tuple(ensure_images(minor).all())
    with bed_session(ClusterSpec(name=name, k8s=minor, layout=load_layout(LAYOUT), driver=driver or DriverSpec()), backend, keep=keep, images=images, client=None) as bed:
        yield bed.kubeconfig


def cmd_upstream(args: argparse.Namespace) -> int:
    from testbed.upstream import exceptions, report
    from testbed.upstream.binary import ensure_e2e
    from testbed.upstream.run import DEFAULT_SKIP, Selection, run_suite

    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        print(f"dra-testbed upstream-e2e: error: --kubeconfig {args.kubeconfig}: no such file", file=sys.stderr)
        return 2
    if args.build_only:
        print(ensure_e2e(args.k8s))
        return 0
    driver = driver_from_args(args)
    if args.kubeconfig and (args.driver_binary or args.driver_image or args.driver != "ours"):
        print("dra-testbed upstream-e2e: error: --driver options need a bed brought up here, not --kubeconfig", file=sys.stderr)
        return 2
    excepted = exceptions.load(Path(args.exceptions)) if args.exceptions else exceptions.load()
    selection = Selection(args.focus, DEFAULT_SKIP[args.backend] if args.skip is None else args.skip)
    folder = Path(args.report or f"upstream-report/{args.backend}-{args.k8s}")
    binary = ensure_e2e(args.k8s)
    ginkgo = None
    if args.procs > 1:
        from testbed.upstream.binary import ensure_ginkgo

        ginkgo = ensure_ginkgo(args.k8s)
    with test_bed(args.backend, args.name, args.k8s, args.kubeconfig, args.keep, driver) as kubeconfig:
        summary = run_suite(binary, kubeconfig, selection, folder, minor=args.k8s, backend=args.backend,
                            exceptions=excepted, timeout_min=args.timeout, procs=args.procs, ginkgo=ginkgo, attempts=args.flake_attempts)
    report.write(summary, folder)
    report.table(summary, Console())
    print(f"junit: {folder / 'junit.xml'}; summary: {folder / 'summary.json'}", file=sys.stderr)
    return 0 if summary.ok else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add `upstream-e2e` to the `dra-testbed` parser."""
    p = sub.add_parser("upstream-e2e", help="run Kubernetes' own DRA e2e tests (test/e2e/dra) against a test bed")
    p.add_argument("--backend", choices=BACKENDS, default="kwok", help="test bed to bring up (default kwok: the control-plane group)")
    p.add_argument("--k8s", type=minor, default=DEFAULT_MINOR, help=f"Kubernetes minor (default {DEFAULT_MINOR})")
    p.add_argument("--focus", type=_regex, default=r"\[DRA\]", help=r"Ginkgo focus regex (default \[DRA\])")
    p.add_argument("--skip", type=_regex, default=None, help=r"Ginkgo skip regex (default: per backend, \[Flaky\] on both as upstream's kind DRA jobs; '' runs every selected spec)")
    p.add_argument("--report", metavar="DIR", help="where junit.xml and summary.json go (default upstream-report/BACKEND-MINOR)")
    p.add_argument("--name", type=cluster_name, default=DEFAULT_NAME, help=f"name of the bed brought up (default {DEFAULT_NAME})")
    p.add_argument("--kubeconfig", help="run against this existing cluster instead of bringing one up")
    p.add_argument("--exceptions", metavar="FILE", help="expected failures (default: testbed/upstream/exceptions.yaml)")
    p.add_argument("--timeout", type=int, default=60, help="minutes the suite may take (default 60)")
    p.add_argument("--procs", type=_procs, default=1, help="parallel Ginkgo processes ([Serial] specs still run alone; default 1)")
    p.add_argument("--flake-attempts", type=_attempts, default=1,
                   help="runs a failing spec may take (default 1; those passing on a later one are listed as flaky)")
    p.add_argument("--keep", action="store_true", help="leave the bed running afterwards")
    p.add_argument("--build-only", action="store_true", help="only make sure e2e.test of the minor is cached; print its path")
    add_driver_options(p, what="the DRA driver on the bed's GPU nodes")
    p.set_defaults(func=cmd_upstream)
