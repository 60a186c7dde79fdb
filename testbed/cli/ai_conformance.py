"""`dra-testbed ai-conformance`: Kubernetes' AI-conformance tests (kubernetes-sigs/ai-conformance, built from
source for the cluster's minor) on a kind bed with a driver under test, or on an existing cluster; writes
results/{junit.xml,e2e.log,results.json}, summary.json and KubernetesAIConformance-1.NN.yaml into the report.

Exit 0 when every test that ran passed, 1 when one failed (or none could run), 2 for bad input (nothing started).
"""

from __future__ import annotations

import argparse
import datetime
import json
import shlex
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hostenv.versions import DEFAULT_MINOR
from testbed.cli.arguments import cluster_name, minor
from testbed.cli.driver_option import add_driver_options, driver_from_args
from testbed.clusters.driver import OURS
from testbed.errors import BadInputError

DEFAULT_REPORT = "ai-conformance-report"
# one worker with two whole H100s: a container handed a GPU it was not given has one to see
DEFAULT_NODES = ["ai-gpu=h100-80gb:2:whole"]
SLICES_WAIT = 180.0  # seconds for the driver's first slices on a fresh bed


class AiConformanceUsageError(BadInputError):
    """Bad arguments: one line, exit 2."""


def register(sub: argparse._SubParsersAction) -> None:
    """Add `ai-conformance` to the `dra-testbed` command."""
    p = sub.add_parser("ai-conformance", help="run Kubernetes' AI-conformance tests (kubernetes-sigs/ai-conformance) on a kind bed "
                                              "or a cluster and write junit, logs and the KubernetesAIConformance checklist")
    p.add_argument("--kubeconfig", help="run against this existing cluster (its own images: no stand-ins are loaded)")
    p.add_argument("--k8s", type=minor, default=DEFAULT_MINOR, help=f"Kubernetes minor of the bed, and of the tests' checklist (default {DEFAULT_MINOR})")
    add_driver_options(p, what="the driver under test on the kind bed")
    p.add_argument("--faults", default="", help="fault switches of dra-testbed's own driver, comma-separated (fake_gpus/driver/faults.py)")
    p.add_argument("--name", type=cluster_name, help="the kind bed's name (default: a fresh aic-kind-*); a running bed of that name "
                                                     "with the same minor, layout and driver is reused and left as found")
    p.add_argument("--keep-cluster", action="store_true", help="leave the bed running afterwards")
    p.add_argument("--run", metavar="REGEX", help="only the tests whose names match (Go's -test.run on top-level names)")
    p.add_argument("--accelerator-type", default="nvidia", help="the tests' -accelerator-type (default nvidia, the only one they know)")
    p.add_argument("--report", default=DEFAULT_REPORT, help=f"report directory (default: {DEFAULT_REPORT})")
    p.add_argument("--conformance-report", metavar="DIR", help="a `dra-testbed conformance` report whose verdicts join the checklist")
    p.add_argument("--build-only", action="store_true", help="fetch and build the tests for --k8s, print the binary, run nothing")
    p.set_defaults(func=cmd_ai_conformance)


def _validate(args: argparse.Namespace):
    """The driver spec of the bed (None on --kubeconfig), after every check that needs nothing started."""
    import re

    from fake_gpus.driver.faults import UnknownFaultError, fault_env, parse_faults
    from testbed.clusters.driver import DriverSpecError

    if args.kubeconfig and (args.name or args.faults or args.driver != OURS or args.driver_binary or args.driver_image):
        raise AiConformanceUsageError("--name, --driver, --driver-binary, --driver-image and --faults need a kind bed, not --kubeconfig "
                                      "(the driver running there is tested as installed)")
    if args.kubeconfig and not Path(args.kubeconfig).is_file():
        raise AiConformanceUsageError(f"no kubeconfig at {args.kubeconfig}")
    if args.conformance_report and not (Path(args.conformance_report) / "PRODUCT.yaml").is_file():
        raise AiConformanceUsageError(f"--conformance-report {args.conformance_report}: no PRODUCT.yaml there; give a `dra-testbed conformance` report directory")
    if args.run:
        try:
            re.compile(args.run)
        except re.error as exc:
            raise AiConformanceUsageError(f"--run {args.run!r} is not a regular expression ({exc}); e.g. --run SecureAccelerator") from None
    try:
        faults = parse_faults(args.faults)
    except UnknownFaultError as exc:
        raise AiConformanceUsageError(str(exc)) from None
    if args.kubeconfig:
        return None
    try:
        driver = driver_from_args(args)
    except DriverSpecError as exc:
        raise AiConformanceUsageError(str(exc)) from None
    if faults and driver.driver != OURS:
        raise AiConformanceUsageError("--faults switches dra-testbed's own driver on; leave it out with another driver")
    return driver.with_env(fault_env(faults)) if faults else driver


def _wait_for_slices(kubeconfig: Path, driver_name: str | None, limit: float = SLICES_WAIT) -> int:
    """Until the driver (any driver, when None) published a slice (the tests fail at once without one); how many."""
    from kubernetes import client, config

    api = config.new_client_from_config(str(kubeconfig))
    try:
        deadline = time.monotonic() + limit
        while True:
            mine = [s for s in client.ResourceV1Api(api).list_resource_slice().items if driver_name in (None, s.spec.driver)]
            if mine or time.monotonic() > deadline:
                return len(mine)
            time.sleep(2)
    finally:
        api.close()


@contextmanager
def _kind_bed(args: argparse.Namespace, driver, images: list[str]) -> Iterator[tuple[Path, list, str]]:
    """A kind bed with `driver` and stand-ins for `images`: its kubeconfig, the stand-ins, the node image."""
    from testbed.aiconformance.standins import provide
    from testbed.beds import bed_session
    from testbed.clusters.base import ClusterSpec
    from testbed.clusters.kind.image_alias import load_as
    from testbed.clusters.kind.images.driver_image import ensure_workload_image
    from testbed.clusters.layout import from_flags

    name = args.name or f"aic-kind-{uuid.uuid4().hex[:6]}"
    spec = ClusterSpec(name=name, k8s=args.k8s, layout=from_flags(DEFAULT_NODES), driver=driver)
    with bed_session(spec, "kind", reuse=True, keep=args.keep_cluster, client=None) as bed:
        stand_ins = provide(images, lambda source, alias: load_as(bed.cluster, source, alias, workers_only=True), ensure_workload_image)
        node_image = (bed.cluster.saved_spec() or {}).get("image", f"kind node of Kubernetes {args.k8s}")
        yield bed.kubeconfig, stand_ins, str(node_image)


@contextmanager
def _cluster(args: argparse.Namespace, driver, images: list[str]) -> Iterator[tuple[Path, list, str]]:
    if args.kubeconfig:
        yield Path(args.kubeconfig), [], "the cluster's own nodes"
    else:
        with _kind_bed(args, driver, images) as found:
            yield found


def cmd_ai_conformance(args: argparse.Namespace) -> int:
    from testbed.aiconformance.checklist import Attribution, fill, read_ours, template_for, write_checklist
    from testbed.aiconformance.events import FAIL, PASS
    from testbed.aiconformance.run import plan, run_tests
    from testbed.aiconformance.source import ensure_tests, list_tests
    from testbed.aiconformance.standins import images_named, uncovered
    from testbed.cli.conformance import _suite_version

    import yaml

    driver = _validate(args)  # AiConformanceUsageError: exit 2 before anything starts
    tests = ensure_tests(args.k8s)
    if args.build_only:
        print(tests.binary)
        return 0
    chosen = plan(list_tests(tests.binary), args.run)
    if not chosen.run and not chosen.not_applicable:
        raise AiConformanceUsageError(f"--run {args.run!r} matches none of the tests: {', '.join(list_tests(tests.binary))}")
    images = images_named(tests.source)
    report = Path(args.report)
    results_dir = report / "results"
    started = datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds")
    driver_name = driver.name if driver else "any driver"
    with _cluster(args, driver, images) as (kubeconfig, stand_ins, node):
        slices = _wait_for_slices(kubeconfig, driver.name if driver else None)
        print(f"{driver_name}: {slices} ResourceSlice(s); running {', '.join(chosen.run) or 'no test'} "
              f"({len(chosen.not_applicable)} not applicable) from {tests.commit[:12]}", file=sys.stderr, flush=True)
        results = run_tests(tests, kubeconfig, chosen, results_dir, args.accelerator_type, echo=lambda line: print(line, file=sys.stderr))
    top = [r for r in results if r.parent is None]
    failed = [r.name for r in top if r.verdict != PASS]
    what = f"{driver.driver} ({driver.name})" if driver else "the drivers installed on the cluster"
    if driver and driver.env:
        what += f", faults {args.faults}"
    attribution = Attribution(driver=what, node=node, stand_ins=[f"{s.image} = {s.built_from}: {s.why}" for s in stand_ins])
    template, template_minor = template_for(tests.source, args.k8s)
    ours = read_ours(Path(args.conformance_report) / "PRODUCT.yaml") if args.conformance_report else None
    ours_link = f"file://{Path(args.conformance_report).resolve() / 'PRODUCT.yaml'}" if args.conformance_report else ""
    metadata = {"platformName": f"dra-testbed {'kind bed' if driver else 'cluster'} with {what}", "platformVersion": _suite_version(),
                "vendorName": "", "description": f"dra-testbed ai-conformance run of {started}, tests of kubernetes-sigs/ai-conformance {tests.commit}"}
    content = fill(yaml.safe_load(template.read_text()), args.k8s, results, chosen.not_applicable, attribution, metadata, ours, ours_link)
    checklist = write_checklist(report, args.k8s, template, template_minor, content)
    summary = {
        "verdict": "pass" if top and not failed else "fail", "started": started, "kubernetes": args.k8s,
        "command": shlex.join(["dra-testbed", *sys.argv[1:]]), "driver": what, "tests": {"repo": tests.repo, "commit": tests.commit},
        "results": [{"name": r.name, "verdict": r.verdict or "unfinished", "seconds": r.elapsed} for r in results],
        "notApplicable": chosen.not_applicable, "standIns": [s.as_dict() for s in stand_ins],
        "imagesWithoutStandIn": uncovered(images) if driver else [], "checklist": checklist.name,
    }
    (report / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    verdicts = ", ".join(f"{r.name} {r.verdict or 'unfinished'}" for r in top) or "no test ran"
    print(f"{verdicts}; {len(chosen.not_applicable)} not applicable (report: {report})", file=sys.stderr)
    return 0 if top and not failed else 1

