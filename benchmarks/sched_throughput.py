"""Benchmark: DRA scheduling throughput on our bed against the same control plane without a publisher and
against Kubernetes' own `scheduler_perf` DRA workload, in one run.

The shape is scheduler_perf's `SchedulingWithResourceClaimTemplate/5000pods_500nodes`: 5,000 devices, 2,500
pods scheduled first (not measured), then 2,500 measured pods, each with a claim from a template asking for
one device of a class; the cluster ends full. Our device count is nodes x GPUs (default 625 x 8 whole
H100s, as a node has at most 8). Three legs:

1. `scheduler_perf`: Kubernetes' integration benchmark (in-process apiserver and scheduler, etcd from the
   toolchain on PATH), built once per version into the cache; its SchedulingThroughput data item.
2. pre-created: a KWOK bed whose publisher has published every node's slices and is then stopped.
3. ours: the same bed with the publisher running (as `dra-testbed up` leaves it).
4. ours-perf-gates (optional): leg 3 with scheduler_perf's feature gates instead of the bed's. The bed turns
   on the alpha DRA gates its suites need (partitionable devices, consumable capacity, ...), and with
   those on the scheduler's allocator is the "experimental" implementation; the workload's defaults pick
   the "incubating" one (k8s.io/dynamic-resource-allocation/structured: the first whose features cover
   the enabled ones). This leg separates what the gates cost from what the harness costs.

Both beds run without the stand-in kubelet (pods are bound, not prepared), as scheduler_perf runs no kubelet.

Legs 2 and 3 count a pod scheduled when it first shows a nodeName and sample every second exactly like
scheduler_perf's throughput collector (first sample skipped, empty intervals merged), so the figures
compare. The ratio ours / scheduler_perf is the goal (>= 0.9). Each bed leg also prints the CPU seconds
every process used while its measured pods were created and scheduled (this script's own included: it
creates the pods and watches them on the same two cores, so it keeps both cheap).

    python benchmarks/sched_throughput.py [--nodes 625] [--gpus 8] [--pods 2500] [--legs perf,pre,ours,ours-perf-gates]
                                          [--rounds N]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable
from unittest.mock import patch

from filelock import FileLock
from kubernetes import client, watch

from fake_gpus.driver import rest
from fake_gpus.machine import launch
from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from hostenv.versions import release_for
from testbed.clusters.base import ClusterSpec
from testbed.clusters.registry import cluster_for
from testbed.clusters.features import FEATURE_GATES
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.kubelet import process as standin
from testbed.kube.namespaces import create_namespace
from testbed.host.progress import step
from testbed.toolchain.gobuild import kubernetes_wrapper, run_go
from testbed.toolchain.resolve import ensure

from publish_scale import cpu_seconds, processes, show_cpu  # the benchmark beside this one
from sched_shapes import api_path, claim_pod, claim_template, one_device

GOAL = 0.9
WORKLOAD = "BenchmarkPerfScheduling/SchedulingWithResourceClaimTemplate/5000pods_500nodes$"
PERF_PACKAGE = "k8s.io/kubernetes/test/integration/scheduler_perf/dra"


@dataclass(frozen=True)
class BedWorkload:
    """What a bed leg runs: `prepare(api)` once (classes, rules, slices), then `pods(api, namespace, count)` with
    `init` pods in namespace init (not measured) and `measured` in namespace test."""

    init: int
    measured: int
    prepare: Callable[[client.ApiClient], None]
    pods: Callable[[client.ApiClient, str, int], "Throughput"]


LEG_NAMES = {"perf": "scheduler_perf", "pre": "pre-created slices", "ours": "ours",
             "ours-perf-gates": "ours with scheduler_perf's gates"}


# ----------------------------------------------------------------------------- scheduler_perf
def perf_binary(minor: str, package: str = PERF_PACKAGE) -> tuple[Path, Path]:
    """scheduler_perf's test binary of `package` (the DRA one or a feature's beside it, ../dra/<feature>) for
    `minor` (built once, cached) and the package's source directory."""
    release = release_for(minor)
    staging = "v0." + release.kubernetes.removeprefix("v").split(".", 1)[1]
    folder = cache_root() / "scheduler-perf" / release.kubernetes
    folder.mkdir(parents=True, exist_ok=True)
    # the DRA package keeps the name it had before the feature packages got binaries of their own
    stem = "dra" if package == PERF_PACKAGE else package.removeprefix(PERF_PACKAGE + "/").replace("/", "-")
    with FileLock(str(folder) + ".lock"):
        binary = folder / f"{stem}.test"
        source = folder / ("source" if stem == "dra" else f"{stem}.source")
        if not binary.exists():
            log = folder.with_name(f"{folder.name}.build.log")  # not with_suffix: v1.34.4 has a dot
            framework = PERF_PACKAGE.rsplit("/", 1)[0]
            with step(f"building scheduler_perf {release.kubernetes} (once; log {log})") as building:
                work, module = kubernetes_wrapper(f"scheduler-perf-{release.kubernetes}", release.kubernetes, staging,
                                                  [framework], log)
                run_go([go_binary(), "mod", "tidy"], work, log, None, go_env())
                # `go test -c` names nothing while it compiles; `go build -v` of the framework the benchmark
                # imports compiles nearly all of it package by package, shown, and the test build reuses it
                run_go([go_binary(), "build", "-v", framework], work, log, building.tick, go_env())
                building.update("compiling the test package and linking it")
                run_go([go_binary(), "test", "-c", "-o", str(binary.with_suffix(".partial")), package], work, log,
                       None, go_env())
            binary.with_suffix(".partial").replace(binary)
            source.write_text(str(module / package.removeprefix("k8s.io/kubernetes/")))
        return binary, Path(source.read_text())


def scheduler_perf(minor: str, package: str = PERF_PACKAGE, workload: str = WORKLOAD,
                   labels: str = "performance", cwd: Path | None = None) -> dict[str, float]:
    """scheduler_perf's SchedulingThroughput (Average, Perc50, Perc90...) for `workload` of `package` (a
    -test.bench pattern) among the test cases carrying `labels`, run here now, in `cwd` (where the binary reads
    performance-config.yaml; the package's source by default)."""
    binary, source = perf_binary(minor, package)
    etcd = ensure(minor, ["etcd"]).path("etcd")
    env = dict(os.environ, PATH=f"{etcd.parent}{os.pathsep}{os.environ['PATH']}")
    with tempfile.TemporaryDirectory(prefix="sched-perf-") as items:
        out = subprocess.run([str(binary), "-test.run", "^$", "-test.bench", workload, "-test.benchtime", "1ns",
                              f"-perf-scheduling-label-filter={labels}", f"-data-items-dir={items}"],
                             cwd=cwd or source, env=env, capture_output=True, text=True, timeout=3600)
        for result in Path(items).glob("*.json"):
            for item in json.loads(result.read_text())["dataItems"]:
                if item["labels"].get("Metric") == "SchedulingThroughput":
                    return item["data"]
    if "Failed to measure SchedulingThroughput" in out.stdout + out.stderr:  # its collector got no 1 s sample
        raise RuntimeError("scheduler_perf scheduled the measured pods in under a second: no throughput sample; "
                           "give more pods")
    tail = "\n".join((out.stdout + out.stderr).strip().splitlines()[-15:])
    raise RuntimeError(f"scheduler_perf gave no SchedulingThroughput (exit {out.returncode}):\n{tail}")


# ----------------------------------------------------------------------------- our bed
class Throughput:
    """scheduler_perf's throughput collector, fed by a pod watch of one namespace."""

    def __init__(self, core: client.CoreV1Api, namespace: str) -> None:
        self.core, self.namespace = core, namespace
        self.scheduled: set[str] = set()
        self.samples: list[float] = []
        self.stop = threading.Event()
        self.watching = threading.Event()
        self.threads = [threading.Thread(target=self._watch, daemon=True), threading.Thread(target=self._sample, daemon=True)]
        for t in self.threads:
            t.start()
        self.watching.wait(60)

    def _watch(self) -> None:
        # Only bound pods (the apiserver filters on spec.nodeName), as raw dicts: the client's typed watch turns
        # every event into a V1Pod model. With typed watch and creates this script used 11-16 of the ~170
        # CPU-seconds of the measured window, 2-3 as it is (scheduler_perf's collector is an informer inside its
        # process).
        pods = rest.lister(self.core.api_client, f"/api/v1/namespaces/{self.namespace}/pods")
        bound = "spec.nodeName!="
        version = pods(limit=1)["metadata"]["resourceVersion"]
        while not self.stop.is_set():
            stream = watch.Watch()
            self.watching.set()
            try:
                for event in stream.stream(pods, field_selector=bound, resource_version=version, timeout_seconds=30,
                                           allow_watch_bookmarks=True):
                    raw = event["raw_object"]
                    version = raw["metadata"]["resourceVersion"]
                    if event["type"] in ("ADDED", "MODIFIED"):
                        self.scheduled.add(raw["metadata"]["name"])
                    if self.stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - a cut or expired watch (seen under load): list again, watch on
                if self.stop.is_set():  # the leg is over and its cluster may be gone already
                    return
                listing = pods(field_selector=bound)
                self.scheduled.update(p["metadata"]["name"] for p in listing["items"])
                version = listing["metadata"]["resourceVersion"]

    def _sample(self) -> None:
        last, last_time, started, skipped = 0, time.monotonic(), False, 0
        while not self.stop.wait(1.0):
            now, count = time.monotonic(), len(self.scheduled)
            if count == 0:
                continue
            if not started:  # the first sample is skipped, as scheduler_perf does
                started, last, last_time = True, count, now
                continue
            if count == last:
                skipped += 1
                continue
            rate = (count - last) / (now - last_time)
            self.samples += [rate] * (skipped + 1)
            last, last_time, skipped = count, now, 0

    def wait(self, count: int, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while len(self.scheduled) < count:
            if time.monotonic() > deadline:
                raise TimeoutError(f"{len(self.scheduled)}/{count} pods scheduled after {timeout:.0f}s")
            time.sleep(0.2)
        time.sleep(1.1)  # one more sample covers the last pods
        self.stop.set()

    def summary(self) -> dict[str, float]:
        values = sorted(self.samples)
        pick = lambda p: values[int(math.ceil(len(values) * p / 100)) - 1]  # noqa: E731 - scheduler_perf's percentiles
        return {"Average": sum(values) / len(values), "Perc50": pick(50), "Perc90": pick(90), "Perc99": pick(99)}


def claim_pods(api: client.ApiClient, namespace: str, count: int, device_class: str) -> Throughput:
    """A namespace with scheduler_perf's claim template (one device of `device_class`) and `count` pods using it."""
    return pods_in(api, namespace, count, claim_template([one_device(device_class)]), claim_pod)


def pods_in(api: client.ApiClient, namespace: str, count: int, template: dict | None,
            pod: Callable[[int], dict]) -> Throughput:
    """A namespace with `template` (a ResourceClaimTemplate, if any) and `count` pods `pod(i)`, watched."""
    core = client.CoreV1Api(api)
    create_namespace(core, namespace)
    if template:
        rest.create(api, api_path(template, namespace), template)
    collector = Throughput(core, namespace)
    # Created by path (fake_gpus.driver.rest), not through the typed API: these pods are created inside the
    # measured window, on the cores the scheduler runs on, and a typed create_namespaced_pod costs 3.7 ms of
    # this script's CPU per pod against 0.9 ms so (1,000 pods each way).
    path = f"/api/v1/namespaces/{namespace}/pods"
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda i: rest.create(api, path, pod(i)), range(count)))
    return collector


def bed(minor: str, nodes: int, gpus: int, pods: int, publisher: bool, perf_gates: bool = False,
        workload: BedWorkload | None = None, prefix: str = "tput") -> dict[str, float]:
    """Throughput of the measured pods on a fresh KWOK bed, with the publisher running or stopped; with
    `perf_gates`, the control plane gets no gates beyond the release's defaults (as the workload's). `workload`
    replaces the default one (`pods` init pods then as many measured, one device of the driver's class each)."""
    name = f"{prefix}-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kwok", name)
    layout = Layout(tuple(NodeSpec(f"gpu-{i:04d}", "h100-80gb", gpus, Mode("whole")) for i in range(nodes)))
    workload = workload or BedWorkload(pods, pods, lambda api: None,
                                       lambda api, namespace, count: claim_pods(api, namespace, count, "gpu.nvidia.com"))
    try:
        # the workload sets DynamicResourceAllocation only, on by default since 1.34: no gate of the bed's
        with patch.dict(FEATURE_GATES, {release_for(minor).minor: ()} if perf_gates else {}):
            cluster.create(ClusterSpec(name=name, k8s=minor, layout=layout, allow_large=True))
        # No stand-in kubelet: scheduler_perf runs none either, and ours starts a kubelet plugin process per
        # node once a pod with claims lands there (some 70 MB each: 625 full nodes would need 44 GB).
        standin.stop(cluster.home)
        if not publisher:
            launch.stop_publisher(cluster.home)  # its slices stay: the bed now has pre-created slices only
        api = cluster.api_client()
        workload.prepare(api)
        for namespace, count, measured in (("init", workload.init, False), ("test", workload.measured, True)):
            if not count:
                continue
            before = cpu_seconds(processes(cluster)) if measured else {}
            collector = workload.pods(api, namespace, count)
            collector.wait(count, timeout=3600)
            if measured:
                # where the two cores went while the measured pods were created and scheduled: the scheduler's
                # share of it is what the control plane's other processes leave it
                show_cpu("measured pods", before, cpu_seconds(processes(cluster)))
                return collector.summary()
    finally:
        cluster.delete()
    raise AssertionError("unreachable")


def show(label: str, data: dict[str, float]) -> None:
    print(f"  {label:<48} average {data['Average']:6.1f} pods/s   p50 {data['Perc50']:6.1f}   p90 {data['Perc90']:6.1f}", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k8s", default="1.34")
    parser.add_argument("--nodes", type=int, default=625)
    parser.add_argument("--gpus", type=int, default=8, help="whole GPUs per node (at most 8)")
    parser.add_argument("--pods", type=int, default=2500, help="pods scheduled first, then as many measured")
    parser.add_argument("--legs", default="perf,pre,ours,ours-perf-gates", help=f"comma-separated, of: {', '.join(LEG_NAMES)}")
    parser.add_argument("--rounds", type=int, default=1, help="run the legs this many times in turn; ratios of the medians")
    args = parser.parse_args()
    legs = args.legs.split(",")
    if unknown := [leg for leg in legs if leg not in LEG_NAMES]:
        parser.error(f"unknown leg {unknown[0]!r}; legs are {', '.join(LEG_NAMES)}")
    if args.rounds < 1:
        parser.error(f"--rounds {args.rounds}: give 1 or more")
    results: dict[str, list[float]] = {leg: [] for leg in legs}
    if "perf" in legs:
        perf_binary(args.k8s)  # the build is not part of any leg
    print(f"Kubernetes {args.k8s}: {args.pods} + {args.pods} pods, each one claim from a template for one device", flush=True)
    for round_ in range(args.rounds):
        if args.rounds > 1:
            print(f"round {round_ + 1} of {args.rounds}", flush=True)
        for leg in legs:
            started = time.monotonic()
            if leg == "perf":
                data = scheduler_perf(args.k8s)
                label = "scheduler_perf 500 nodes x 10"
            else:
                data = bed(args.k8s, args.nodes, args.gpus, args.pods, publisher=leg != "pre", perf_gates=leg == "ours-perf-gates")
                label = f"{LEG_NAMES[leg]} {args.nodes} x {args.gpus} GPUs"
            results[leg].append(data["Average"])
            show(label, data)
            print(f"    ({time.monotonic() - started:.0f} s for the leg)", flush=True)
    if args.rounds > 1:
        # one leg's average moved by up to a fifth between runs on this machine (the whole machine's speed: every
        # process used more or less CPU for the same pods), so rounds interleave the legs and the medians compare
        for leg in legs:
            print(f"  {LEG_NAMES[leg]:<48} median {statistics.median(results[leg]):6.1f} pods/s   "
                  f"(rounds: {', '.join(f'{v:.1f}' for v in results[leg])})", flush=True)
    for ours in ("ours", "ours-perf-gates"):
        for base in ("perf", "pre"):
            if ours in legs and base in legs:
                ratio = statistics.median(results[ours]) / statistics.median(results[base])
                print(f"  ratio {LEG_NAMES[ours]} / {LEG_NAMES[base]}: {ratio:.2f}{f' (goal {GOAL})' if base == 'perf' else ''}",
                      flush=True)

if __name__ == "__main__":
    main()
