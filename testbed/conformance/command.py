"""`dra-testbed conformance`: run the suite on a test bed of its own or an existing cluster, write the report.

Exit 0 when every MUST passed, 1 when one failed, 3 when none failed but one could not run here
(incomplete), 2 for bad input (nothing started).
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import shlex
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from testbed.conformance.checks import PROFILES, select
from testbed.errors import BadInputError
from testbed.conformance.verdict import exit_code, verdict

DEFAULT_LAYOUT = Path(__file__).resolve().parents[2] / "clusters" / "conformance" / "kwok-gpu-fleet.yaml"
DEFAULT_REPORT = "conformance-report"


class ConformanceUsageError(BadInputError):
    """Bad arguments: one line, exit 2."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `conformance` to the `dra-testbed` command."""
    from testbed.cli import BACKENDS, _minor
    from hostenv.versions import DEFAULT_MINOR

    p = sub.add_parser("conformance", help="run the DRA GPU driver conformance suite and write its report (exit 0: every MUST passed)")
    p.add_argument("--kubeconfig", help="run against this existing cluster (changes nothing beyond a namespace of its own)")
    p.add_argument("--backend", choices=BACKENDS, help="bring up a test bed of this backend (default: kwok)")
    p.add_argument("--layout", help=f"GPU nodes of the test bed, or those expected on --kubeconfig (default for a test bed: {DEFAULT_LAYOUT.name})")
    p.add_argument("--k8s", type=_minor, default=DEFAULT_MINOR, help=f"Kubernetes minor of the test bed (default {DEFAULT_MINOR})")
    p.add_argument("--driver", required=True, help="the DRA driver name under test, e.g. gpu.nvidia.com")
    p.add_argument("--driver-binary", help="the driver's kubelet plugin binary to run on the test bed")
    p.add_argument("--driver-image", help="the driver's container image to run on a kind test bed")
    p.add_argument("--profile", choices=[*PROFILES, "all"], default="all", help="which checks (default: all)")
    p.add_argument("--report", default=DEFAULT_REPORT, help=f"report directory (default: {DEFAULT_REPORT})")
    p.add_argument("--faults", default="", help="fault switches of dra-testbed's own driver, comma-separated (see fake_gpus/driver/faults.py)")
    p.add_argument("--keep-cluster", action="store_true", help="leave the test bed running afterwards")
    p.set_defaults(func=cmd_conformance)


def _validate(args: argparse.Namespace):
    from fake_gpus.driver.faults import UnknownFaultError, parse_faults
    from testbed.clusters.layout import load_layout

    if args.kubeconfig and args.backend:
        raise ConformanceUsageError("give either --kubeconfig FILE (an existing cluster) or --backend (a test bed of its own), not both")
    if args.driver_binary and args.driver_image:
        raise ConformanceUsageError("give either --driver-binary PATH or --driver-image IMAGE, not both")
    if args.kubeconfig and (args.driver_binary or args.driver_image or args.faults):
        raise ConformanceUsageError("--driver-binary, --driver-image and --faults need a test bed (--backend), not --kubeconfig")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise ConformanceUsageError(f"no kubeconfig at {args.kubeconfig}")
    if args.driver_binary and not Path(args.driver_binary).is_file():
        raise ConformanceUsageError(f"no driver binary at {args.driver_binary}")
    if args.driver_binary or args.driver_image:
        raise ConformanceUsageError("--driver-binary/--driver-image are not wired to the conformance bed yet (the seam is "
                                    "testbed/clusters/driver.py); valid now: our driver on --backend kwok, or any driver on --kubeconfig")
    try:
        faults = parse_faults(args.faults)
    except UnknownFaultError as exc:
        raise ConformanceUsageError(str(exc)) from None
    layout = load_layout(args.layout) if args.layout else (None if args.kubeconfig else load_layout(str(DEFAULT_LAYOUT)))
    return faults, layout


def _tree_digest(root: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        digest.update(str(path.relative_to(root)).encode() + b"\0" + path.read_bytes())
    return f"sha256:{digest.hexdigest()}"


def _suite_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return f"dra-testbed {version('dra-testbed')}"
    except PackageNotFoundError:
        return "dra-testbed (not installed)"


@contextmanager
def _subject(args: argparse.Namespace, layout, faults) -> Iterator:
    from fake_gpus.driver.faults import fault_env
    from fake_gpus.driver.identity import DEFAULT_DRIVER, DRIVER_ENV
    from testbed.conformance.beds import existing_bed, kwok_bed

    if args.kubeconfig:
        with existing_bed(args.kubeconfig, args.driver, layout) as (subject, _):
            yield subject
        return
    env = {**(fault_env(faults) if faults else {}), **({DRIVER_ENV: args.driver} if args.driver != DEFAULT_DRIVER else {})}
    if (args.backend or "kwok") == "kwok":
        with kwok_bed(layout, args.k8s, args.driver, env, keep=args.keep_cluster) as (subject, _):
            yield subject
        return
    raise ConformanceUsageError("--backend kind is not wired to the conformance suite yet; valid: --backend kwok, or --kubeconfig FILE")


def cmd_conformance(args: argparse.Namespace) -> int:
    import os

    from hypothesis import __version__ as hypothesis_version
    from kubernetes import client

    from fake_gpus.driver.identity import DRIVER_ENV
    from testbed.conformance.report import RunInfo, write_report
    from testbed.conformance.run import run_checks

    faults, layout = _validate(args)  # ConformanceUsageError: exit 2 before anything starts
    report = Path(args.report)
    lines: list[str] = []

    def log(line: str) -> None:
        stamped = f"{datetime.datetime.now(datetime.timezone.utc):%H:%M:%S} {line}"
        lines.append(stamped)
        print(stamped, file=sys.stderr, flush=True)

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    os.environ[DRIVER_ENV] = args.driver  # the generated workloads' strategies name the driver's classes
    with _subject(args, layout, faults) as subject:
        server = client.VersionApi(subject.api).get_code().git_version
        log(f"conformance of {args.driver} on {subject.backend} (Kubernetes {server}), profile {args.profile}, report in {report}")
        outcomes = run_checks(select(args.profile), subject, report, log)
    ours = not args.kubeconfig
    info = RunInfo(
        driver=args.driver, backend=subject.backend, profile=args.profile, kubernetes=server,
        driver_artifact="dra-testbed's own driver (fake_gpus/driver)" if ours else "the driver installed on the cluster",
        driver_digest=_tree_digest(Path(__file__).resolve().parents[2] / "fake_gpus" / "driver") if ours else "",
        suite_version=_suite_version(), seeds={"hypothesis": hypothesis_version, "derandomize": True, "database": None},
        command=shlex.join(["dra-testbed", *sys.argv[1:]]), started=started, faults=",".join(sorted(faults)))
    write_report(report, outcomes, info, lines)
    log(f"verdict: {verdict(outcomes)} (report: {report / 'report.html'})")
    return exit_code(outcomes)
