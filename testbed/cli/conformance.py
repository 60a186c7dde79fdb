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

from hostenv.versions import DEFAULT_MINOR
from testbed.cli.arguments import cluster_name, minor
from testbed.cli.driver_option import add_driver_options, driver_from_args
from testbed.clusters.registry import BACKENDS
from testbed.conformance.checks import PROFILES, select
from testbed.clusters.driver import OURS
from testbed.errors import BadInputError
from testbed.conformance.verdict import exit_code, verdict

DEFAULT_LAYOUT = Path(__file__).resolve().parents[2] / "clusters" / "conformance" / "kwok-gpu-fleet.yaml"
DEFAULT_KIND_LAYOUT = DEFAULT_LAYOUT.with_name("kind-gpu.yaml")
DEFAULT_REPORT = "conformance-report"


class ConformanceUsageError(BadInputError):
    """Bad arguments: one line, exit 2."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `conformance` to the `dra-testbed` command."""
    p = sub.add_parser("conformance", help="run the DRA GPU driver conformance suite and write its report (exit 0: every MUST passed)")
    p.add_argument("--kubeconfig", help="run against this existing cluster (changes nothing beyond a namespace of its own)")
    p.add_argument("--backend", choices=BACKENDS, help="bring up a test bed of this backend (default: kwok)")
    p.add_argument("--layout", help="GPU nodes of the test bed, or those expected on --kubeconfig "
                                    f"(default: {DEFAULT_LAYOUT.name} on kwok, {DEFAULT_KIND_LAYOUT.name} on kind)")
    p.add_argument("--k8s", type=minor, default=DEFAULT_MINOR, help=f"Kubernetes minor of the test bed (default {DEFAULT_MINOR})")
    add_driver_options(p, what="the driver under test on the test bed (on --kubeconfig: whatever runs there, "
                               "named by --driver-name)")
    p.add_argument("--profile", choices=[*PROFILES, "all"], default="all", help="which checks (default: all)")
    p.add_argument("--report", default=DEFAULT_REPORT, help=f"report directory (default: {DEFAULT_REPORT})")
    p.add_argument("--faults", default="", help="fault switches of dra-testbed's own driver, comma-separated (see fake_gpus/driver/faults.py)")
    p.add_argument("--keep-cluster", action="store_true", help="leave the test bed running afterwards")
    p.add_argument("--name", type=cluster_name, help="kind: the test bed's cluster name (default: a fresh conf-kind-*); a running bed of that "
                                  "name with the same minor, layout and driver is reused and left as found")
    p.set_defaults(func=cmd_conformance)


def _validate(args: argparse.Namespace):
    from fake_gpus.driver.faults import UnknownFaultError, parse_faults
    from testbed.clusters.layout import load_layout

    if args.kubeconfig and args.backend:
        raise ConformanceUsageError("give either --kubeconfig FILE (an existing cluster) or --backend (a test bed of its own), not both")
    if args.name and args.backend != "kind":
        raise ConformanceUsageError("--name names a kind test bed: it goes with --backend kind")
    if args.kubeconfig and (args.driver_binary or args.driver_image or args.faults or args.driver != OURS):
        raise ConformanceUsageError("--driver, --driver-binary, --driver-image and --faults need a test bed (--backend), not "
                                    "--kubeconfig (the driver running there is named by --driver-name)")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise ConformanceUsageError(f"no kubeconfig at {args.kubeconfig}")
    try:
        faults = parse_faults(args.faults)
    except UnknownFaultError as exc:
        raise ConformanceUsageError(str(exc)) from None
    default = DEFAULT_KIND_LAYOUT if args.backend == "kind" else DEFAULT_LAYOUT
    layout = load_layout(args.layout) if args.layout else (None if args.kubeconfig else load_layout(str(default)))
    return faults, layout, None if args.kubeconfig else _driver_spec(args, faults)


def _driver_spec(args: argparse.Namespace, faults: frozenset[str]):
    """The driver a test bed runs, from the --driver options; ours takes the fault switches."""
    from fake_gpus.driver.faults import fault_env

    driver = driver_from_args(args)
    if faults and driver.driver != OURS:
        raise ConformanceUsageError("--faults switches dra-testbed's own driver on; leave it out with another driver")
    return driver.with_env(fault_env(faults)) if faults else driver


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


def _file_digest(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return f"sha256:{digest.hexdigest()}"


def _artifact(driver) -> tuple[str, str]:
    """What ran as the driver and its digest (a tree hash of ours, the binary's sha256, the image reference)."""
    if driver is None:
        return "the driver installed on the cluster", ""
    if driver.path:
        return f"kubelet plugin binary {driver.path}", _file_digest(Path(driver.path))
    if driver.image:
        return f"image {driver.image}", ""
    if driver.driver != OURS:
        return f"driver {driver.driver!r}", ""
    return "dra-testbed's own driver (fake_gpus/driver)", _tree_digest(Path(__file__).resolve().parents[2] / "fake_gpus" / "driver")


@contextmanager
def _subject(args: argparse.Namespace, layout, driver) -> Iterator:
    from fake_gpus.driver.identity import current_identity
    from testbed.clusters.driver import DriverSpecError
    from testbed.conformance.beds import existing_bed, kind_bed, kwok_bed

    if args.kubeconfig:
        with existing_bed(args.kubeconfig, args.driver_name or current_identity().driver, layout) as (subject, _):
            yield subject
        return
    try:
        if (args.backend or "kwok") == "kwok":
            bed = kwok_bed(layout, args.k8s, driver, keep=args.keep_cluster)
        else:
            bed = kind_bed(layout, args.k8s, driver, name=args.name, keep=args.keep_cluster)
        with bed as (subject, _):
            yield subject
    except DriverSpecError as exc:  # the backend cannot run this kind of driver: refused before it starts
        raise ConformanceUsageError(str(exc)) from None


def cmd_conformance(args: argparse.Namespace) -> int:
    import os

    from hypothesis import __version__ as hypothesis_version
    from kubernetes import client

    from fake_gpus.driver.identity import DRIVER_ENV
    from testbed.conformance.report import RunInfo, write_report
    from testbed.conformance.run import run_checks

    faults, layout, driver = _validate(args)  # ConformanceUsageError: exit 2 before anything starts
    report = Path(args.report)
    lines: list[str] = []

    def log(line: str) -> None:
        stamped = f"{datetime.datetime.now(datetime.timezone.utc):%H:%M:%S} {line}"
        lines.append(stamped)
        print(stamped, file=sys.stderr, flush=True)

    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    with _subject(args, layout, driver) as subject:
        os.environ[DRIVER_ENV] = subject.driver  # the generated workloads' strategies name the driver's classes
        server = client.VersionApi(subject.api).get_code().git_version
        log(f"conformance of {subject.driver} ({driver.driver if driver else 'as installed'}) on {subject.backend} (Kubernetes {server}), profile {args.profile}, report in {report}")
        outcomes = run_checks(select(args.profile), subject, report, log)
    artifact, digest = _artifact(driver)
    info = RunInfo(
        driver=subject.driver, backend=subject.backend, profile=args.profile, kubernetes=server,
        driver_artifact=artifact, driver_digest=digest,
        suite_version=_suite_version(), seeds={"hypothesis": hypothesis_version, "derandomize": True, "database": None},
        command=shlex.join(["dra-testbed", *sys.argv[1:]]), started=started, faults=",".join(sorted(faults)))
    write_report(report, outcomes, info, lines)
    log(f"verdict: {verdict(outcomes)} (report: {report / 'report.html'})")
    return exit_code(outcomes)
