"""Benchmark: scheduler_perf's DRA feature workloads (partitionable devices, consumable capacity, device taints,
extended resource, prioritized list) against the same shapes on our bed, one JSON line per feature.

Per feature (benchmarks/sched_shapes.py has the shapes and which upstream workload each one follows):

1. scheduler_perf: the feature's package (test/integration/scheduler_perf/dra/<feature>) built once per version
   (sched_throughput.perf_binary), run on a copy of its performance-config.yaml holding the feature's test case
   with one added workload: the named workload's params resized to --nodes/--devices/--init/--pods, no steady
   state. Its SchedulingThroughput.
2. ours: a KWOK bed of --nodes nodes with --devices whole H100s each, publisher running, no stand-in kubelet (as
   sched_throughput's ours leg), the feature's classes, rules and slices created, then --init pods (not measured)
   and --pods measured pods, sampled like scheduler_perf's collector. Device taints, prioritized list and
   extended resource use the GPUs our publisher publishes; partitionable devices and consumable capacity use
   slices this script pre-creates in upstream's shape (our publisher publishes neither shape).

    python benchmarks/sched_features.py --feature device-taints[,prioritized-list,...|all] [--k8s 1.36]
                                        [--nodes 50] [--devices 8] [--init 0] [--pods 200]
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from kubernetes import client

from fake_gpus.driver import rest
from hostenv.goenv import go_env
from hostenv.versions import release_for
from testbed.kube.device_taint_rules import served_version

from sched_shapes import (FEATURES, PRE_CREATED, OurShape, ShapeError, Size, api_path, bench_pattern, feature,
                          measured_size, upstream_config)
from sched_throughput import PERF_PACKAGE, BedWorkload, Throughput, bed, perf_binary, pods_in, scheduler_perf, show


def upstream_folder(minor: str) -> Path:
    """test/integration/scheduler_perf/dra of `minor`'s Kubernetes in the Go module cache (where building the
    binaries puts it)."""
    folder = Path(go_env()["GOMODCACHE"]) / f"k8s.io/kubernetes@{release_for(minor).kubernetes}" / "test/integration/scheduler_perf/dra"
    if not folder.is_dir():
        perf_binary(minor)  # fetches the module
    return folder


def resized(minor: str, name: str, size: Size) -> tuple[str, dict[str, Any]]:
    """The feature's resized upstream config (text) and its params."""
    chosen = feature(name)
    test_case, named = chosen.workload(minor)
    text = (upstream_folder(minor) / chosen.package / "performance-config.yaml").read_text()
    return upstream_config(text, test_case, named, size, chosen.pools)


def run_upstream(minor: str, name: str, size: Size) -> dict[str, float]:
    """scheduler_perf's throughput for the feature at `size`."""
    chosen = feature(name)
    package = f"{PERF_PACKAGE}/{chosen.package}"
    text, _ = resized(minor, name, size)
    # the binary reads performance-config.yaml from its working directory and templates from ../templates
    with tempfile.TemporaryDirectory(prefix="schedperf-config-") as folder:
        work = Path(folder) / chosen.package
        work.mkdir()
        (work / "performance-config.yaml").write_text(text)
        (Path(folder) / "templates").symlink_to(upstream_folder(minor) / "templates")
        return scheduler_perf(minor, package, bench_pattern(chosen.workload(minor)[0]), cwd=work)


def created(api: client.ApiClient, objects: list[dict[str, Any]]) -> None:
    """Create the cluster-scoped objects of a shape, a DeviceTaintRule in the version the server serves."""
    for obj in objects:
        if obj["kind"] == "DeviceTaintRule":
            obj = {**obj, "apiVersion": served_version(api)}
        rest.create(api, api_path(obj), obj)


def bed_workload(shape: OurShape, size: Size) -> BedWorkload:
    """What the bed leg runs for `shape` at `size` (init pods with the init claims where upstream's differ)."""
    def pods(api: client.ApiClient, namespace: str, count: int) -> Throughput:
        template = shape.init_template if namespace == "init" and shape.init_template else shape.template
        return pods_in(api, namespace, count, template, shape.pod)
    return BedWorkload(size.init, size.measured, lambda api: created(api, shape.objects), pods)


def run_feature(minor: str, name: str, size: Size, sides: list[str]) -> dict[str, Any]:
    """The `sides` (perf, ours) of one feature; the JSON line's fields (the ratio where both ran)."""
    chosen = feature(name)
    test_case, named = chosen.workload(minor)
    _, params = resized(minor, name, size)
    line: dict[str, Any] = {"feature": name, "k8s": release_for(minor).kubernetes,
                            "scheduler_perf_case": f"{test_case}/{named}", "size": vars(measured_size(params, size)),
                            "slices": "pre-created" if chosen.slices == PRE_CREATED else "published", "seconds": {},
                            "params": params}
    if "perf" in sides:
        started = time.monotonic()
        line["scheduler_perf"] = run_upstream(minor, name, size)
        line["seconds"]["scheduler_perf"] = round(time.monotonic() - started)
        show(f"{name}: scheduler_perf {test_case}", line["scheduler_perf"])
    if "ours" in sides:
        started = time.monotonic()
        ran = measured_size(line["params"], size)
        workload = bed_workload(chosen.ours(ran, line["params"]), ran)
        line["ours"] = bed(minor, size.nodes, size.devices, 0, publisher=True, workload=workload, prefix="schedperf")
        line["seconds"]["ours"] = round(time.monotonic() - started)
        show(f"{name}: ours", line["ours"])
    if "perf" in sides and "ours" in sides:
        line["ratio"] = round(line["ours"]["Average"] / line["scheduler_perf"]["Average"], 3)
    return line


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--feature", required=True, help=f"comma-separated, or all; of: {', '.join(FEATURES)}")
    parser.add_argument("--k8s", default="1.36")
    parser.add_argument("--nodes", type=int, default=50)
    parser.add_argument("--devices", type=int, default=8, help="devices per node (whole GPUs on ours; at most 8)")
    parser.add_argument("--init", type=int, default=0, help="pods scheduled first, not measured")
    parser.add_argument("--pods", type=int, default=200, help="measured pods")
    parser.add_argument("--sides", default="perf,ours", help="comma-separated, of: perf (scheduler_perf), ours")
    args = parser.parse_args()
    names = list(FEATURES) if args.feature == "all" else args.feature.split(",")
    sides = args.sides.split(",")
    if unknown := [side for side in sides if side not in ("perf", "ours")]:
        parser.error(f"unknown side {unknown[0]!r}; sides are perf, ours")
    size = Size(args.nodes, args.devices, args.init, args.pods)
    try:
        for name in names:
            feature(name).check(size)
            feature(name).workload(release_for(args.k8s).minor)
    except ShapeError as error:
        parser.error(str(error))
    for name in names if "perf" in sides else ():  # the builds are not part of any leg
        perf_binary(args.k8s, f"{PERF_PACKAGE}/{feature(name).package}")
    for name in names:
        print(json.dumps(run_feature(args.k8s, name, size, sides)), flush=True)


if __name__ == "__main__":
    sys.exit(main())
