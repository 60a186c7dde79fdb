"""NVIDIA's gpu-kubelet-plugin against our driver on the same fake boards: time to slices, prepare latency.

    python benchmarks/nvidia_vs_ours.py [--nodes 3] [--iterations 10]   # the plugin found as testbed/drivers/nvidia/binary.py says

Brings up a KWOK cluster (real apiserver and scheduler). Time to slices: from creating a KWOK node of
8 x H100 in dynamic MIG until its whole pool is published, for nodes served by NVIDIA's plugin (hardware
made, plugin process started, slices published) and, as the baseline in the same run, by our publisher.
Prepare latency: the same claims (a whole GPU, a dynamic 1g.10gb) prepared and unprepared over gRPC as
the kubelet calls it, on NVIDIA's plugin and on ours, each on its own fake node. Ratios are NVIDIA / ours.
Everything started is stopped and removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client  # noqa: E402

from fake_gpus.driver.kubeletplugin.kubelet_client import KubeletClient  # noqa: E402
from fake_gpus.driver.kubeletplugin.protos import load  # noqa: E402
from fake_gpus.machine.provision import provision_node  # noqa: E402
from prepare_latency import DRIVER, NAMESPACE, make_claims, measure, start_plugin, timed  # noqa: E402
from testbed.clusters.base import ClusterSpec  # noqa: E402
from testbed.clusters.registry import cluster_for
from testbed.clusters.kwok.nodes import node_object  # noqa: E402
from testbed.clusters.layout import NodeSpec, from_flags, parse_mode  # noqa: E402
from testbed.drivers.nvidia import nodes, plugin  # noqa: E402
from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary  # noqa: E402
from hostenv.processes import terminate  # noqa: E402
from hostenv.versions import DEFAULT_MINOR  # noqa: E402

MODE = "dynamic-mig"


def wait_pool(api: client.ApiClient, node: str, timeout: float = 120.0) -> None:
    deadline = time.monotonic() + timeout
    while plugin.published(api, node) is None:
        if time.monotonic() > deadline:
            raise RuntimeError(f"no complete pool for {node} in {timeout:.0f}s")
        time.sleep(0.02)


def ours_to_slices(api: client.ApiClient, name: str) -> float:
    start = time.perf_counter()
    client.CoreV1Api(api).create_node(body=node_object(NodeSpec(name, "h100-80gb", 8, parse_mode(MODE, name))))
    wait_pool(api, name)
    return time.perf_counter() - start


def nvidia_to_slices(api: client.ApiClient, home: Path, kubeconfig: Path, binary: Path, name: str) -> tuple[float, plugin.NodePlugin]:
    start = time.perf_counter()
    p = nodes.start_node(api, home, kubeconfig, NodeSpec(name, "h100-80gb", 8, parse_mode(MODE, name)), binary)
    plugin.wait_published(api, p)
    return time.perf_counter() - start, p


def line(name: str, nvidia: list[float], ours: list[float]) -> str:
    a, b = statistics.median(nvidia), statistics.median(ours)
    return f"{name:<32} NVIDIA {a * 1e3:9.1f} ms   ours {b * 1e3:9.1f} ms   NVIDIA/ours x{a / b:6.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=3, help="nodes per driver for the time to slices")
    parser.add_argument("--iterations", type=int, default=10)
    parser.add_argument("--k8s", default=DEFAULT_MINOR)
    args = parser.parse_args()
    try:
        binary = plugin_binary()
    except PluginNotFound as exc:
        print(exc, file=sys.stderr)
        return 2
    load(args.k8s)
    root = Path(tempfile.mkdtemp(prefix="nvb-", dir="/tmp"))
    cluster = cluster_for("kwok", f"nv-bench-{uuid.uuid4().hex[:6]}")
    ours_plugin: subprocess.Popen | None = None
    started: list[plugin.NodePlugin] = []
    try:
        kubeconfig = cluster.create(ClusterSpec(name=cluster.name, k8s=args.k8s, layout=from_flags(["warm=h100-80gb:1:whole"])))
        api = cluster.api_client()
        ours_t = [ours_to_slices(api, f"ours-{i}") for i in range(args.nodes)]
        nv_t = []
        for i in range(args.nodes):
            t, p = nvidia_to_slices(api, root, kubeconfig, binary, f"nv-{i}")
            nv_t.append(t)
            started.append(p)

        client.CoreV1Api(api).create_namespace(body={"metadata": {"name": NAMESPACE}})
        n = args.iterations + 1  # the first of each is a warm-up
        nv_node, ours_node = started[0], "ours-p"
        claims = {d: {who: make_claims(api, d, n, pool) for who, pool in (("nv", nv_node.node), ("ours", ours_node))}
                  for d in ("gpu-0", "gpu-0-mig-1g10gb-19-0")}
        state_dir = root / "ours-p-nvml"
        provision_node(state_dir, "h100-80gb", 8)
        ours_plugin = start_plugin(root / "ours-p", state_dir, kubeconfig, args.k8s, node=ours_node)
        results = {}
        with KubeletClient(nv_node.registry_dir / f"{DRIVER}-reg.sock", nv_node.socket, args.k8s) as nvk, \
                KubeletClient(root / "ours-p" / "registry" / f"{DRIVER}-reg.sock", root / "ours-p" / "plugin" / "dra.sock", args.k8s) as ok:
            for device, by in claims.items():
                for who, k in (("nv", nvk), ("ours", ok)):
                    measure(k, by[who][:1])
                    results[(device, who)] = measure(k, by[who][1:])
        api.close()
        print(f"NVIDIA's gpu-kubelet-plugin vs ours, Kubernetes {args.k8s}, fake 8 x H100 nodes in {MODE}")
        print(line(f"node created -> slices ({args.nodes} nodes)", nv_t, ours_t))
        for device, label in (("gpu-0", "whole GPU"), ("gpu-0-mig-1g10gb-19-0", "dynamic 1g.10gb")):
            (nv_p, nv_u), (o_p, o_u) = results[(device, "nv")], results[(device, "ours")]
            print(line(f"prepare {label}", nv_p, o_p))
            print(line(f"unprepare {label}", nv_u, o_u))
        return 0
    finally:
        for p in started:
            plugin.remove(p)
        if ours_plugin is not None:
            terminate(ours_plugin.pid, grace=30)
        cluster.delete()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
