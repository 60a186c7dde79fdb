"""Prepare latency of shared and time-sliced claims: our kubelet plugin against NVIDIA's gpu-kubelet-plugin.

    python benchmarks/sharing_prepare_latency.py [--iterations 10] [--k8s 1.34]   # NVIDIA's plugin found as testbed/drivers/nvidia/binary.py says

Brings up a KWOK cluster (real apiserver). Each driver gets a fake node of one H100 sharing it (`whole:shares=4`;
NVIDIA's plugin with --consumable-shares 4 and gate TimeSlicingSettings) and is called over gRPC as the kubelet
calls it. Timed, one claim at a time, NodePrepareResources then NodeUnprepareResources of:
  - a shared claim (a shareID, no config) joining a GPU another claim holds prepared: the shared path, where
    the plugin compares the new claim's config with the holder's;
  - a TimeSlicing claim (GpuConfig, interval Long) with the GPU held by no one: both plugins run the node's
    nvidia-smi twice (compute mode, then time slice) to prepare and twice to undo it.
The first claim of each kind is a warm-up. NVIDIA's plugin runs with its client's own limits (5 requests/s, bursts
of 10, as its Helm chart leaves them): back-to-back claims soon wait for its rate limiter; `--nvidia-api-qps N`
raises both to N, to see the plugin's own work. The baseline is NVIDIA's plugin on the same claims, run in the same
process; the ratio printed is ours / NVIDIA's (below 1: ours faster). Everything started is stopped at the end.
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kubernetes import client  # noqa: E402

from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId, KubeletClient  # noqa: E402
from fake_gpus.driver.kubeletplugin.protos import load  # noqa: E402
from fake_gpus.machine.provision import provision_node  # noqa: E402
from hostenv.processes import terminate  # noqa: E402
from hostenv.versions import DEFAULT_MINOR  # noqa: E402
from prepare_latency import DRIVER, NAMESPACE, measure, start_plugin  # noqa: E402
from testbed.clusters.base import ClusterSpec  # noqa: E402
from testbed.clusters.layout import NodeSpec, from_flags, parse_mode  # noqa: E402
from testbed.clusters.registry import cluster_for  # noqa: E402
from testbed.drivers.nvidia import nodes, plugin  # noqa: E402
from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary  # noqa: E402

BOARD, SHARES, DEVICE = "h100-80gb", "4", "gpu-0"
TIME_SLICING = {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig",
                "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": "Long"}}}


def shared_claims(api: client.ApiClient, pool: str, n: int, config: dict | None = None) -> list[ClaimId]:
    """n claims each allocated one share of DEVICE of `pool` (a shareID and its consumed share, status written
    directly as the scheduler would), with the opaque `config` in spec and allocation when given."""
    resource = client.ResourceV1Api(api)
    configs = [{"requests": ["gpu"], "opaque": {"driver": DRIVER, "parameters": config}}] if config else []
    claims = []
    for _ in range(n):
        name = f"s-{uuid.uuid4().hex[:10]}"
        body = {"metadata": {"name": name}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com"}}], "config": configs}}}
        created = resource.create_namespaced_resource_claim(NAMESPACE, body)
        result = {"request": "gpu", "driver": DRIVER, "pool": pool, "device": DEVICE,
                  "shareID": str(uuid.uuid4()), "consumedCapacity": {"shares": "1"}}
        allocation = {"devices": {"results": [result], "config": [{"source": "FromClaim", **c} for c in configs]}}
        resource.patch_namespaced_resource_claim_status(name, NAMESPACE, {"status": {"allocation": allocation}})
        claims.append(ClaimId(NAMESPACE, created.metadata.uid, name))
    return claims


def timings(k: KubeletClient, api: client.ApiClient, pool: str, n: int) -> dict[str, tuple[list[float], list[float]]]:
    """Kind of claim -> (prepare, unprepare) latencies in seconds, warm-up left out."""
    out = {"time-sliced": measure(k, shared_claims(api, pool, n, TIME_SLICING))}  # first: the GPU held by no one
    holder = shared_claims(api, pool, 1)
    if error := k.prepare(holder).claims[holder[0].uid].error:
        raise RuntimeError(f"the holder's prepare failed: {error}")
    out["shared (GPU held)"] = measure(k, shared_claims(api, pool, n))
    k.unprepare(holder)
    return {kind: (prep[1:], unprep[1:]) for kind, (prep, unprep) in out.items()}


def line(name: str, ours: list[float], nvidia: list[float]) -> str:
    a, b = statistics.median(ours), statistics.median(nvidia)
    return f"{name:<32} ours {a * 1e3:8.1f} ms   NVIDIA {b * 1e3:8.1f} ms   ours/NVIDIA x{a / b:5.2f}"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=10, help="claims timed per kind and driver (after one warm-up)")
    parser.add_argument("--k8s", default=DEFAULT_MINOR)
    parser.add_argument("--nvidia-api-qps", type=int, help="NVIDIA's --kube-api-qps and --kube-api-burst (default: its own, 5 and 10)")
    args = parser.parse_args()
    if args.iterations < 1 or (args.nvidia_api_qps is not None and args.nvidia_api_qps < 1):
        print("--iterations and --nvidia-api-qps: must be at least 1", file=sys.stderr)
        return 2
    try:
        binary = plugin_binary()
    except PluginNotFound as exc:
        print(exc, file=sys.stderr)
        return 2
    load(args.k8s)  # generate stubs before anything is timed
    root = Path(tempfile.mkdtemp(prefix="shb-", dir="/tmp"))
    cluster = cluster_for("kwok", f"share-bench-{uuid.uuid4().hex[:6]}")
    ours_proc: subprocess.Popen | None = None
    nv: plugin.NodePlugin | None = None
    try:
        kubeconfig = cluster.create(ClusterSpec(name=cluster.name, k8s=args.k8s, layout=from_flags(["warm=h100-80gb:1:whole"])))
        api = cluster.api_client()
        client.CoreV1Api(api).create_namespace(body={"metadata": {"name": NAMESPACE}})
        mode = f"whole:shares={SHARES}"
        limits = {"KUBE_API_QPS": str(args.nvidia_api_qps), "KUBE_API_BURST": str(args.nvidia_api_qps)} if args.nvidia_api_qps else None
        nv = nodes.start_node(api, root, kubeconfig, NodeSpec("nv-s", BOARD, 1, parse_mode(mode, "nv-s")), binary,
                              env=limits, gates=("TimeSlicingSettings=true",))
        plugin.wait_published(api, nv)
        state_dir = root / "ours-nvml"
        provision_node(state_dir, BOARD, 1)
        ours_proc = start_plugin(root / "ours-p", state_dir, kubeconfig, args.k8s, node="ours-s", more=("--consumable-shares", SHARES))
        n = args.iterations + 1
        with KubeletClient(nv.registry_dir / f"{DRIVER}-reg.sock", nv.socket, args.k8s) as nvk, \
                KubeletClient(root / "ours-p" / "registry" / f"{DRIVER}-reg.sock", root / "ours-p" / "plugin" / "dra.sock", args.k8s) as ok:
            theirs = timings(nvk, api, nv.node, n)
            ours = timings(ok, api, "ours-s", n)
        api.close()
        print(f"prepare latency, ours vs NVIDIA's gpu-kubelet-plugin, Kubernetes {args.k8s}, fake 1 x H100 `{mode}`, "
              f"median of {args.iterations}, NVIDIA's API client at "
              + (f"{args.nvidia_api_qps} requests/s" if args.nvidia_api_qps else "its default 5 requests/s, bursts of 10"))
        for kind in theirs:
            print(line(f"prepare {kind}", ours[kind][0], theirs[kind][0]))
            print(line(f"unprepare {kind}", ours[kind][1], theirs[kind][1]))
        return 0
    finally:
        if nv is not None:
            plugin.remove(nv)
        if ours_proc is not None:
            terminate(ours_proc.pid, grace=30)
        cluster.delete()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
