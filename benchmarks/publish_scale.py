"""Benchmark: publishing dynamic-MIG ResourceSlices for N KWOK nodes x 8 GPUs against KWOK creating the nodes.

In one run on one cluster: (1) with the publisher stopped, create N labelled H100 nodes and wait until
KWOK reports every one Ready; (2) start the publisher and time it until its first publish is done
(state directories created, every GPU read through NVML, every slice created and accepted by the API
server), then check that every pool is complete.

    python benchmarks/publish_scale.py [--nodes 1000] [--k8s 1.34]
"""

from __future__ import annotations

import argparse
import json
import time
import uuid
from concurrent.futures import ThreadPoolExecutor

from kubernetes import client

from fake_gpus.driver import launch
from testbed.clusters.base import ClusterSpec
from testbed.clusters.kwok import KwokCluster, node_object
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.waiting import wait_for

BOARD = "h100-80gb"
GPUS = 8


def ready(node) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in (node.status.conditions or []))


def bench_node(node: NodeSpec) -> dict:
    """The test bed's Node object, labelled so the wait below sees only the benchmark's nodes."""
    body = node_object(node)
    body["metadata"]["labels"]["bench"] = "publish-scale"
    return body


def create_nodes(api: client.ApiClient, nodes: list[NodeSpec]) -> float:
    """Create the Node objects and wait until KWOK has made every one Ready; seconds taken."""
    core = client.CoreV1Api(api)
    started = time.monotonic()
    with ThreadPoolExecutor(8) as pool:
        list(pool.map(lambda n: core.create_node(body=bench_node(n), _preload_content=False), nodes))
    wanted = {n.name for n in nodes}
    seen: set[str] = set()

    def all_ready(node) -> bool:
        if node.metadata.name in wanted and ready(node):
            seen.add(node.metadata.name)
        return seen >= wanted

    wait_for(core.list_node, all_ready, timeout=1800, what=f"{len(nodes)} nodes Ready", label_selector="bench=publish-scale")
    return time.monotonic() - started


def check_pools(api: client.ApiClient, nodes: list[NodeSpec]) -> tuple[int, int]:
    """(slices, devices) published for the benchmark nodes; asserts every pool is complete."""
    resource = client.ResourceV1Api(api)
    by_pool: dict[str, list] = {}
    token = None
    while True:  # paged and undecoded: one list of every slice is hundreds of MB
        page = json.loads(resource.list_resource_slice(limit=100, _continue=token, _preload_content=False).data)
        for s in page["items"]:
            by_pool.setdefault(s["spec"]["pool"]["name"], []).append(s)
        token = page["metadata"].get("continue")
        if not token:
            break
    for node in nodes:
        members = by_pool.get(node.name, [])
        assert members and all(s["spec"]["pool"]["resourceSliceCount"] == len(members) for s in members), f"pool {node.name} incomplete"
    mine = [s for n in nodes for s in by_pool[n.name]]
    return len(mine), sum(len(s["spec"].get("devices") or []) for s in mine)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--k8s", default="1.34")
    args = parser.parse_args()
    name = f"bench-{uuid.uuid4().hex[:6]}"
    cluster = KwokCluster(name)
    seed = Layout((NodeSpec("seed", BOARD, 1, Mode("whole")),))
    try:
        kubeconfig = cluster.create(ClusterSpec(name=name, k8s=args.k8s, layout=seed))
        launch.stop_publisher(cluster.home)  # phase 1 is KWOK alone
        api = cluster.api_client()
        nodes = [NodeSpec(f"gpu-{i:04d}", BOARD, GPUS, Mode("dynamic-mig")) for i in range(args.nodes)]
        kwok_seconds = create_nodes(api, nodes)
        started = time.monotonic()
        launch.start_publisher(cluster.home, kubeconfig)  # returns once the first publish is done
        publish_seconds = time.monotonic() - started
        print(f"Kubernetes {args.k8s}, {args.nodes} KWOK nodes x {GPUS} {BOARD} GPUs, dynamic MIG", flush=True)
        print(f"  KWOK alone: {args.nodes} nodes created and Ready   {kwok_seconds:8.1f} s "
              f"({args.nodes / kwok_seconds:.1f} nodes/s)", flush=True)
        print(f"  publisher: first publish of every node done     {publish_seconds:8.1f} s "
              f"({args.nodes / publish_seconds:.1f} nodes/s)", flush=True)
        print(f"  ratio publish / KWOK nodes: {publish_seconds / kwok_seconds:.2f}", flush=True)
        n_slices, n_devices = check_pools(api, nodes)
        api.close()
        print(f"  checked: {n_slices} slices with {n_devices} devices, every pool complete "
              f"({n_slices / publish_seconds:.1f} slices/s accepted)")
    finally:
        cluster.delete()


if __name__ == "__main__":
    main()
