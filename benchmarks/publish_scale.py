"""Benchmark: publishing dynamic-MIG ResourceSlices for N KWOK nodes against KWOK creating the nodes.

Per node count, in one run on one fresh cluster: (1) with the publisher stopped, create N labelled GPU
nodes and wait until KWOK reports every one Ready; (2) start the publisher and time it until its first
publish is done (state directories created, every GPU read through NVML, every slice created and accepted
by the API server), then check that every pool is complete and that pods with MIG claims schedule on the
fleet. Every process's peak RSS (VmHWM) is read at the end of each phase and summed. The publish phase
also prints its floor, the least time any publisher sending the same requests needs: the CPU every other
process spent in the phase beyond the bed's background (measured for 20 s with the publisher stopped: KWOK
keeping the nodes alive), on the cores the background leaves.

    python benchmarks/publish_scale.py [--nodes 1000 5000] [--fleet h100|mixed] [--k8s 1.34] [--pods 50]
                                       [--credentials node|admin|both] [--stock] [--profile DIR]

`--credentials node` (default, as `up` runs it): every node's slices written with that node's own token
(fake_gpus/driver/credentials.py); `admin`: with the cluster's admin certificate (the baseline of their cost);
`both`: one run each, then their ratio. `--stock`: without the large-fleet control-plane settings
(testbed/clusters/kwok/tuning.py); `--profile DIR`: the apiserver's CPU (first minute of publishing) and
heap profiles, and the scheduler's and controller-manager's heaps after publishing and after the pods.
"""

from __future__ import annotations

import argparse
import os
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import urllib3
import yaml
from kubernetes import client

from fake_gpus.driver.paging import pages
from fake_gpus.machine import launch
from hostenv.processes import stat_fields
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT
from testbed.clusters.base import ClusterSpec
from testbed.clusters.registry import cluster_for
from testbed.clusters.kwok import KwokCluster, node_object
from testbed.clusters.kwok import cluster as kwok_cluster
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import WaitTimeout, until, wait_for

FLEETS = {"h100": (("h100-80gb", 8),),
          "mixed": (("h100-80gb", 8), ("h200-141gb", 8), ("b200-180gb", 8), ("gb200-186gb", 4))}
GOAL = 2.0


def ready(node: dict) -> bool:
    """A Node (as undecoded JSON) that KWOK has made Ready."""
    return any(c["type"] == "Ready" and c["status"] == "True" for c in (node.get("status") or {}).get("conditions") or [])


def bench_node(node: NodeSpec) -> dict:
    """The test bed's Node object, labelled so the wait below sees only the benchmark's nodes."""
    body = node_object(node)
    body["metadata"]["labels"]["bench"] = "publish-scale"
    return body


def fleet_nodes(fleet: str, count: int) -> list[NodeSpec]:
    boards = FLEETS[fleet]
    return [NodeSpec(f"gpu-{i:05d}", boards[i % len(boards)][0], boards[i % len(boards)][1], Mode("dynamic-mig"))
            for i in range(count)]


def create_nodes(api: client.ApiClient, nodes: list[NodeSpec]) -> float:
    """Create the Node objects and wait until KWOK has made every one Ready; seconds taken."""
    core = client.CoreV1Api(api)
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: core.create_node(body=bench_node(n), _preload_content=False), nodes))
    waiting = {n.name for n in nodes}

    def none_waiting() -> bool:
        # paged and undecoded (as check_pools): every poll decoding 5,000 Node objects into client models made
        # this script's own peak (which counts in the sum it reports) 614 MiB at 5,000 nodes
        waiting.difference_update(n["metadata"]["name"] for n in pages(core.list_node, label_selector="bench=publish-scale") if ready(n))
        return not waiting

    try:
        until(f"{len(nodes)} nodes Ready", none_waiting, timeout=3600, interval=1.0)
    except WaitTimeout as timeout:
        raise WaitTimeout(f"{timeout}: {len(waiting)} not Ready, e.g. {sorted(waiting)[:3]}") from None
    return time.monotonic() - started


def check_pools(api: client.ApiClient, nodes: list[NodeSpec]) -> tuple[int, int]:
    """(slices, devices) published for the benchmark nodes; asserts every pool is complete."""
    resource = client.ResourceV1Api(api)
    by_pool: dict[str, list[int]] = {}
    total = {}
    for s in pages(resource.list_resource_slice):  # paged and undecoded: one list of every slice is gigabytes
        pool = s["spec"]["pool"]
        by_pool.setdefault(pool["name"], []).append(len(s["spec"].get("devices") or []))
        total[pool["name"]] = pool["resourceSliceCount"]
    for node in nodes:
        assert len(by_pool.get(node.name, [])) == total.get(node.name, -1), f"pool {node.name} incomplete"
    return sum(len(by_pool[n.name]) for n in nodes), sum(sum(by_pool[n.name]) for n in nodes)


def schedule_pods(api: client.ApiClient, count: int) -> float:
    """`count` pods, each with a claim for one 1g MIG device; seconds until every one is bound."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    create_namespace(core, "bench")
    started = time.monotonic()
    for i in range(count):
        resource.create_namespaced_resource_claim("bench", {
            "metadata": {"name": f"c-{i}"},
            "spec": {"devices": {"requests": [{"name": "mig", "exactly": {"deviceClassName": "mig.nvidia.com", "selectors": [
                {"cel": {"expression": "device.attributes['gpu.nvidia.com'].profile.startsWith('1g.')"}}]}}]}}})
        core.create_namespaced_pod("bench", {
            "metadata": {"name": f"p-{i}"},
            "spec": {"containers": [{"name": "c", "image": "registry.invalid/none:0", "resources": {"claims": [{"name": "mig"}]}}],
                     "resourceClaims": [{"name": "mig", "resourceClaimName": f"c-{i}"}]}})
    bound: set[str] = set()

    def all_bound(pod) -> bool:
        if pod.spec.node_name and pod.metadata.name not in bound:
            bound.add(pod.metadata.name)
            if len(bound) % 10 == 0:  # progress: at 5,000 nodes a pod takes seconds
                print(f"  ... {len(bound)} of {count} pods bound after {time.monotonic() - started:.0f} s", flush=True)
        return len(bound) >= count

    try:
        wait_for(core.list_namespaced_pod, all_bound, namespace="bench", timeout=1800, what=f"{count} pods bound")
    except WaitTimeout as timeout:
        raise WaitTimeout(f"{len(bound)} of {count} pods bound: {timeout}") from None
    return time.monotonic() - started


def peak_rss(pids: dict[str, int]) -> dict[str, int]:
    """Peak resident memory (VmHWM, bytes) of each process."""
    found = {}
    for name, pid in pids.items():
        try:
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    found[name] = int(line.split()[1]) * 1024
        except OSError:
            continue
    return found


def cpu_seconds(pids: dict[str, int]) -> dict[str, float]:
    """CPU time (user + system, seconds) each process has used so far: the cost of a phase, which a
    loaded machine stretches in wall time but not in CPU."""
    found = {}
    for name, pid in pids.items():
        fields = stat_fields(pid)
        if fields is not None:  # None: the process is gone
            found[name] = (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return found


def show_cpu(title: str, before: dict[str, float], after: dict[str, float]) -> float:
    used = {name: after[name] - before.get(name, 0.0) for name in after}
    parts = ", ".join(f"{name} {value:.0f}" for name, value in sorted(used.items()))
    print(f"  CPU seconds {title}: {parts}; sum {sum(used.values()):.0f}", flush=True)
    return sum(used.values())


def background_rate(pids: dict[str, int], seconds: float = 20.0) -> float:
    """Cores the processes use together (this script excepted) over `seconds` left to themselves: for the bed
    after KWOK alone, the leases, heartbeats and their writes that go on whatever the publisher does."""
    pids = {name: pid for name, pid in pids.items() if name != "benchmark"}
    before, started = cpu_seconds(pids), time.monotonic()
    time.sleep(seconds)
    after = cpu_seconds(pids)
    return sum(after[name] - before.get(name, 0.0) for name in after) / (time.monotonic() - started)


def publish_floor(before: dict[str, float], after: dict[str, float], seconds: float, background: float,
                  kwok_seconds: float) -> str:
    """The least time any publisher sending the same requests could take: the CPU the rest of the bed spent
    during the publish phase, less its background over that time, is the slices' share; it needs the cores
    the background leaves, with the background going on meanwhile."""
    others = sum(after[name] - before.get(name, 0.0) for name in after if name not in ("publisher", "benchmark"))
    work = max(others - background * seconds, 0.0)
    cores = len(os.sched_getaffinity(0))
    floor = work / max(cores - background, 0.1)
    return (f"floor for a publisher costing nothing: the rest of the bed used {others:.0f} CPU-s in the phase, "
            f"{work:.0f} beyond its background of {background:.2f} cores, so at least {floor:.1f} s on {cores} cores "
            f"(ratio >= {floor / kwok_seconds:.2f})")


def processes(cluster: KwokCluster) -> dict[str, int]:
    pids = dict(cluster.pids())
    try:
        pids["publisher"] = int((cluster.home / launch.PID_FILE).read_text())
    except (OSError, ValueError):
        pass
    pids["benchmark"] = os.getpid()
    return pids


def show_memory(title: str, rss: dict[str, int]) -> int:
    total = sum(rss.values())
    parts = ", ".join(f"{name} {value / 2**20:.0f}" for name, value in sorted(rss.items()))
    print(f"  peak RSS {title} (MiB): {parts}; sum {total / 2**30:.2f} GiB", flush=True)
    return total


def save_profile(api: client.ApiClient, folder: Path | None, name: str, query: str = "") -> None:
    """The apiserver's pprof `name` (heap, profile...) into `folder`, to read with `go tool pprof`."""
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    response = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/debug/pprof/{name}{query}")
    (folder / f"apiserver-{name}.pb.gz").write_bytes(response.data)


PPROF_OPEN = {"authorization-always-allow-paths": "/healthz,/readyz,/livez,/debug/pprof/*"}


def open_component_pprof() -> None:
    """For --profile only: the scheduler and controller-manager serve pprof to anyone on loopback. kwokctl's
    components authenticate nobody (no client CA, no TokenReview), so pprof answers 403 to any credential
    unless its path is always allowed."""
    plain = kwok_cluster.component_patches

    def patched(large: bool, *args, **kwargs) -> dict:
        patches = plain(large, *args, **kwargs)
        for component in ("kube-scheduler", "kube-controller-manager"):
            patches.setdefault(component, {}).setdefault("args", {}).update(PPROF_OPEN)
        return patches

    kwok_cluster.component_patches = patched


def save_component_heaps(cluster: KwokCluster, folder: Path | None) -> None:
    """The scheduler's and controller-manager's heap profiles into `folder` (self-signed serving
    certificates: not verified, loopback only)."""
    if folder is None:
        return
    folder.mkdir(parents=True, exist_ok=True)
    options = next(d for d in yaml.safe_load_all((cluster.kwok_dir / "kwok.yaml").read_text())
                   if isinstance(d, dict) and d.get("kind") == "KwokctlConfiguration")["options"]
    pool = urllib3.PoolManager(cert_reqs="CERT_NONE")
    urllib3.disable_warnings(urllib3.exceptions.InsecureRequestWarning)
    for component, option in (("kube-scheduler", "kubeSchedulerPort"), ("kube-controller-manager", "kubeControllerManagerPort")):
        response = pool.request("GET", f"https://127.0.0.1:{options[option]}/debug/pprof/heap", timeout=120)
        if response.status == 200:
            (folder / f"{component}-heap.pb.gz").write_bytes(response.data)
        else:
            print(f"  no heap profile of {component}: HTTP {response.status}", flush=True)


def run(count: int, fleet: str, k8s: str, pods: int, credentials: str = "node", profile: Path | None = None,
        stock: bool = False) -> dict:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kwok", name)
    seed = Layout((NodeSpec("seed", "h100-80gb", 1, Mode("whole")),))
    try:
        # allow_large: the control plane gets the large-fleet settings (testbed/clusters/kwok/tuning.py)
        kubeconfig = cluster.create(ClusterSpec(name=name, k8s=k8s, layout=seed, allow_large=not stock))
        launch.stop_publisher(cluster.home)  # phase 1 is KWOK alone
        api = cluster.api_client()
        nodes = fleet_nodes(fleet, count)
        gpus = sum(n.count for n in nodes)
        # each phase's figures are printed as soon as they are measured: a later phase that fails or times
        # out (at 5,000 nodes the last one comes after half an hour) does not lose the earlier ones
        print(f"Kubernetes {k8s}, {count} KWOK nodes, {gpus} GPUs ({fleet}), dynamic MIG, {credentials} credentials, "
              f"{'stock control plane' if stock else 'large-fleet settings'}", flush=True)
        cpu_start = cpu_seconds(processes(cluster))
        kwok_seconds = create_nodes(api, nodes)
        kwok_rss = peak_rss(processes(cluster))
        cpu_kwok = cpu_seconds(processes(cluster))
        print(f"  KWOK alone: {count} nodes created and Ready        {kwok_seconds:8.1f} s ({count / kwok_seconds:.1f} nodes/s)")
        kwok_cpu = show_cpu("KWOK alone", cpu_start, cpu_kwok)
        kwok_total = show_memory("after KWOK alone", kwok_rss)
        background = background_rate(processes(cluster))
        print(f"  background with the publisher stopped: {background:.2f} cores (KWOK keeping {count} nodes alive)", flush=True)
        cpu_ready = cpu_seconds(processes(cluster))  # the publish phase counts from here
        launch.START_TIMEOUT = 3600.0  # a first publish of thousands of nodes
        started = time.monotonic()
        identity = (DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT) if credentials == "node" else None
        proc = launch.spawn_publisher(cluster.home, kubeconfig, node_identity=identity)
        cpu_profile = None
        if profile:  # CPU of the apiserver during the first minute of publishing, beside the timing
            cpu_profile = threading.Thread(target=save_profile, args=(api, profile, "profile", "?seconds=60"))
            cpu_profile.start()
        launch.wait_publisher(cluster.home, proc)  # returns once the first publish is done
        publish_seconds = time.monotonic() - started
        cpu_published = cpu_seconds(processes(cluster))  # before waiting for the profile, which may run longer
        if cpu_profile:
            cpu_profile.join()
        save_profile(api, profile, "heap")
        save_component_heaps(cluster, profile)
        published_rss = peak_rss(processes(cluster))  # before any pod: what holding the slices costs
        print(f"  publisher: first publish of every node done     {publish_seconds:8.1f} s ({count / publish_seconds:.1f} nodes/s)")
        publish_cpu = show_cpu("publishing", {**cpu_ready, "publisher": 0.0}, cpu_published)
        show_memory("after publishing, before pods", published_rss)
        print(f"  ratio publish time / KWOK nodes time: {publish_seconds / kwok_seconds:.2f} (goal {GOAL})")
        print(f"  ratio publish CPU / KWOK nodes CPU: {publish_cpu / kwok_cpu:.2f} (all processes; the benchmark's own creation included)", flush=True)
        print(f"  {publish_floor(cpu_ready, cpu_published, publish_seconds, background, kwok_seconds)}", flush=True)
        n_slices, n_devices = check_pools(api, nodes)
        print(f"  checked: {n_slices} slices with {n_devices} devices, every pool complete "
              f"({n_slices / publish_seconds:.1f} slices/s accepted)", flush=True)
        cpu_checked = cpu_seconds(processes(cluster))
        pod_seconds = schedule_pods(api, pods) if pods else 0.0
        if pods:  # the publisher's share here is what the harness costs a scheduler at work
            show_cpu("scheduling pods", cpu_checked, cpu_seconds(processes(cluster)))
        if profile:
            save_component_heaps(cluster, profile / "after-pods")
        all_rss = peak_rss(processes(cluster))
        api.close()
        if pods:
            print(f"  schedulable: {pods} pods with a 1g MIG claim bound in {pod_seconds:.1f} s")
        total = show_memory("after publishing and scheduling", all_rss)
        print(f"  ratio peak RSS sum / KWOK alone: {total / kwok_total:.2f}; sum {total / 2**30:.2f} GiB (limit 16 GiB)", flush=True)
        return {"nodes": count, "gpus": gpus, "kwok_s": kwok_seconds, "publish_s": publish_seconds, "rss_sum": total}
    finally:
        cluster.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, nargs="+", default=[1000])
    parser.add_argument("--fleet", choices=sorted(FLEETS), default="h100")
    parser.add_argument("--k8s", default="1.34")
    parser.add_argument("--pods", type=int, default=50, help="pods with a MIG claim scheduled after publishing")
    parser.add_argument("--credentials", choices=("node", "admin", "both"), default="node",
                        help="whose credential writes each node's slices (both: a run each and their ratio)")
    parser.add_argument("--stock", action="store_true", help="without the large-fleet control-plane settings")
    parser.add_argument("--profile", type=Path, help="save the apiserver's CPU (publish) and heap profiles here")
    args = parser.parse_args()
    if args.profile:
        open_component_pprof()
    for count in args.nodes:
        kinds = ("admin", "node") if args.credentials == "both" else (args.credentials,)
        results = {kind: run(count, args.fleet, args.k8s, args.pods, kind,
                                  args.profile and args.profile / f"{count}-{kind}", args.stock) for kind in kinds}
        if len(results) == 2:
            print(f"  ratio publish time with node credentials / with admin: "
                  f"{results['node']['publish_s'] / results['admin']['publish_s']:.2f} ({count} nodes)", flush=True)


if __name__ == "__main__":
    main()
