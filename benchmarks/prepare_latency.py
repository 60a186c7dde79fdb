"""NodePrepareResources / NodeUnprepareResources latency of the kubelet plugin, against a no-op call.

    python benchmarks/prepare_latency.py [--iterations 30] [--k8s 1.34]

Brings up a KWOK cluster (real apiserver, holds the claims), a fake-NVML node with one H100, and the
plugin as its own process on unix sockets. Each iteration prepares and unprepares one claim over
gRPC as the kubelet would: a whole GPU (claim read + CDI spec + checkpoint) and a dynamic MIG
1g.10gb (the same plus MIG instance creation / destruction through NVML). The baseline is a
NodePrepareResources call with no claims on the same server in the same run (gRPC + unix socket
round trip only). Everything started is stopped and removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kubernetes import client  # noqa: E402

from fake_gpus.driver.identity import current_identity  # noqa: E402
from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId, KubeletClient  # noqa: E402
from fake_gpus.driver.kubeletplugin.protos import load  # noqa: E402
from fake_gpus.nvml import state  # noqa: E402
from fake_gpus.nvml.build import ensure_library  # noqa: E402
from hostenv.processes import terminate  # noqa: E402
from hostenv.versions import DEFAULT_MINOR  # noqa: E402
from testbed.clusters.base import ClusterSpec  # noqa: E402
from testbed.clusters.registry import cluster_for
from testbed.clusters.layout import from_flags  # noqa: E402

NODE = "bench-node-0"
DRIVER = current_identity().driver
NAMESPACE = "bench"


def timed(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def make_claims(api: client.ApiClient, device: str, n: int, pool: str = NODE) -> list[ClaimId]:
    """n claims allocated `device` (status written directly, as a scheduler would)."""
    resource = client.ResourceV1Api(api)
    claims = []
    for _ in range(n):
        name = f"c-{uuid.uuid4().hex[:10]}"
        body = {"metadata": {"name": name}, "spec": {"devices": {"requests": [
            {"name": "gpu", "exactly": {"deviceClassName": "gpu.nvidia.com", "allocationMode": "ExactCount", "count": 1}}]}}}
        created = resource.create_namespaced_resource_claim(NAMESPACE, body)
        resource.patch_namespaced_resource_claim_status(name, NAMESPACE, {"status": {"allocation": {"devices": {"results": [
            {"request": "gpu", "driver": DRIVER, "pool": pool, "device": device}]}}}})
        claims.append(ClaimId(NAMESPACE, created.metadata.uid, name))
    return claims


def start_plugin(root: Path, state_dir: Path, kubeconfig: Path, k8s: str, node: str = NODE,
                 more: tuple[str, ...] = ()) -> subprocess.Popen:
    """Our plugin for `node`, serving; `more`: further flags (e.g. --consumable-shares 4)."""
    args = [sys.executable, "-m", "fake_gpus.driver.kubeletplugin", "--node-name", node, "--state-dir", str(state_dir),
            "--nvml-lib-dir", str(ensure_library()), "--plugin-dir", str(root / "plugin"), "--registry-dir", str(root / "registry"),
            "--cdi-dir", str(root / "cdi"), "--kubeconfig", str(kubeconfig), "--k8s", k8s, *more]
    env = {k: v for k, v in os.environ.items() if k not in ("DRA_TESTBED_FAULTS", "NVIDIA_VISIBLE_DEVICES")}
    env["PYTHONPATH"] = str(Path(__file__).resolve().parents[1])
    proc = subprocess.Popen(args, env=env, stderr=subprocess.PIPE, text=True)
    assert proc.stderr is not None
    for line in proc.stderr:  # the plugin logs "serving" once both sockets listen
        if "kubelet-plugin: serving" in line:
            threading.Thread(target=proc.stderr.read, daemon=True).start()  # keep draining: a full pipe would block it
            return proc
    raise RuntimeError(f"plugin exited with {proc.wait()} before serving")


def summary(name: str, samples: list[float], baseline: float) -> str:
    med = statistics.median(samples)
    p90 = sorted(samples)[int(0.9 * (len(samples) - 1))]
    return f"{name:<30} median {med * 1e3:8.2f} ms   p90 {p90 * 1e3:8.2f} ms   x{med / baseline:7.1f} no-op"


def measure(k: KubeletClient, claims: list[ClaimId]) -> tuple[list[float], list[float]]:
    prep, unprep = [], []
    for c in claims:
        prep.append(timed(lambda: _ok(k.prepare([c]).claims[c.uid].error)))
        unprep.append(timed(lambda: _ok(k.unprepare([c]).claims[c.uid].error)))
    return prep, unprep


def _ok(error: str) -> None:
    if error:
        raise RuntimeError(error)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--k8s", default=DEFAULT_MINOR)
    args = parser.parse_args()
    load(args.k8s)  # generate stubs before anything is timed
    root = Path(tempfile.mkdtemp(prefix="plg-bench-", dir="/tmp"))
    cluster = cluster_for("kwok", f"plg-bench-{uuid.uuid4().hex[:6]}")
    plugin: subprocess.Popen | None = None
    try:
        kubeconfig = cluster.create(ClusterSpec(name=cluster.name, k8s=args.k8s, layout=from_flags([f"{NODE}=h100-80gb:1:whole"])))
        api = cluster.api_client()
        client.CoreV1Api(api).create_namespace(body={"metadata": {"name": NAMESPACE}})
        whole = make_claims(api, "gpu-0", args.iterations)
        mig = make_claims(api, "gpu-0-mig-1g10gb-19-0", args.iterations)
        state_dir = root / "nvml"
        state.create_state_dir(state_dir, [("h100-80gb", 1)])
        plugin = start_plugin(root, state_dir, kubeconfig, args.k8s)
        with KubeletClient(root / "registry" / f"{DRIVER}-reg.sock", root / "plugin" / "dra.sock", args.k8s) as k:
            k.prepare([])  # connect and warm up
            noop = [timed(lambda: k.prepare([])) for _ in range(max(200, args.iterations))]
            measure(k, whole[:1] + mig[:1])  # warm-up: first NVML MIG enable, first API read
            whole_p, whole_u = measure(k, whole[1:])
            mig_p, mig_u = measure(k, mig[1:])
        api.close()
        base = statistics.median(noop)
        print(f"kubelet plugin latency, {args.iterations - 1} iterations each, Kubernetes {args.k8s}, fake H100 node")
        print(summary("no-op NodePrepareResources", noop, base))
        print(summary("prepare whole GPU", whole_p, base))
        print(summary("unprepare whole GPU", whole_u, base))
        print(summary("prepare dynamic MIG 1g.10gb", mig_p, base))
        print(summary("unprepare dynamic MIG 1g.10gb", mig_u, base))
        return 0
    finally:
        if plugin is not None:
            terminate(plugin.pid, grace=30)
        cluster.delete()
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
