"""Benchmark: `dra-testbed up --backend kind` against raw `kind create cluster` to the same end point,
and a pod to Running.

Both bring up a control plane + one worker from the same (already built) node image in the same run,
alternating, and stop once every node is Ready; `up` also has its driver running and the worker's
ResourceSlices listed (raw kind has no driver). `up` is the command a user runs, started with no
dra-testbed process running: its dockerd too is started by the command (`down` stops it). Raw kind is
timed twice: from the same engine-less start (the engine started inside the timing) and with the engine
already running (as a user's resident Docker would be; the stricter baseline, the one the goal is
judged on). Raw kind's nodes get the same ptp CNI config files `up` mounts, so they can become Ready.
The node, driver and workers' images are built before any timing, as after a first `up` (each is built
once per version of its inputs and cached).
"pod to Running" times a pod of the workload image (pull policy Never) from create to phase Running
on the worker, without and with a whole-GPU claim. `--image-build` first times a node-image build from
the current cache (cold only if the cache is empty) and reports the image size.

    python benchmarks/kind_up.py [--rounds 2] [--k8s 1.34] [--image-build]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client, watch

from hostenv.processes import run_child
from testbed.clusters.base import ClusterSpec
from testbed.clusters.registry import cluster_for
from testbed.clusters.kind.network import CNI_CONF_IN_NODE, POD_SUBNET, cni_config, remove_kind_network_if_unused
from testbed.clusters.layout import from_flags
from testbed.host.docker.dockerd import docker, ensure_engine, stop_engine_if_idle
from testbed.clusters.kind.images.node_image import ensure_node_image
from testbed.clusters.kind.images.driver_image import ensure_driver_image, ensure_workload_image
from testbed.clusters.kind.images.worker_image import ensure_worker_image
from testbed.toolchain.resolve import ensure

NODE_FLAG = "gpu-0=h100-80gb:1:whole"
LAYOUT = from_flags([NODE_FLAG])


def timed_up(minor: str) -> float:
    """Seconds of the `dra-testbed up --backend kind` command from no project process (engine included)
    until it returns: nodes Ready, driver running, slices listed (checked after); `down` is not timed."""
    name = f"bench-up-{uuid.uuid4().hex[:4]}"
    cli = [sys.executable, "-m", "testbed.cli"]
    stop_engine_if_idle()
    started = time.monotonic()
    run_child([*cli, "up", "--backend", "kind", "--name", name, "--k8s", minor, "--node", NODE_FLAG], check=True,
              capture_output=True)
    elapsed = time.monotonic() - started
    try:
        api = cluster_for("kind", name).api_client()
        slices = client.ResourceV1Api(api).list_resource_slice().items
        api.close()
        if not slices:
            raise RuntimeError("`up` returned with no ResourceSlice listed")
    finally:
        subprocess.run([*cli, "down", "--backend", "kind", "--name", name], check=True, capture_output=True)
    return elapsed


def raw_kind_config(folder: Path) -> Path:
    """A kind config of a control plane and one worker with `up`'s CNI files mounted (kind's own CNI is off)."""
    nodes = []
    for index, role in enumerate(("control-plane", "worker")):
        conf = folder / f"cni-{index}.conflist"
        conf.write_text(json.dumps(cni_config(index)))
        nodes.append(f"- role: {role}\n  extraMounts:\n  - hostPath: {conf}\n    containerPath: {CNI_CONF_IN_NODE}\n    readOnly: true\n")
    config = folder / "kind.yaml"
    config.write_text("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnetworking:\n  disableDefaultCNI: true\n"
                      f"  podSubnet: {POD_SUBNET}\nnodes:\n" + "".join(nodes))
    return config


def timed_raw_kind(minor: str, image: str, start_engine: bool) -> float:
    """Seconds of raw `kind create cluster` + every node Ready, optionally from a stopped engine (started
    within the timing); the engine is left running either way for the next leg to decide."""
    kind = ensure(minor, ["kind"]).path("kind")
    kubectl = ensure(minor, ["kubectl"]).path("kubectl")
    if start_engine:
        stop_engine_if_idle()
    else:
        ensure_engine()
    with tempfile.TemporaryDirectory() as tmp:
        config, kubeconfig = raw_kind_config(Path(tmp)), Path(tmp) / "kubeconfig"
        env = dict(os.environ, KIND_EXPERIMENTAL_PROVIDER="docker")
        started = time.monotonic()
        if start_engine:
            ensure_engine()
        try:
            subprocess.run([str(kind), "create", "cluster", "--name", "bench-kind-raw", "--image", image, "--config", str(config),
                            "--kubeconfig", str(kubeconfig)], env=env, check=True, capture_output=True)
            # kind returns once the control plane answers; the worker joins and turns Ready after
            subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), "wait", "--for=condition=Ready", "node", "--all",
                            "--timeout=300s"], check=True, capture_output=True)
            elapsed = time.monotonic() - started
        finally:
            subprocess.run([str(kind), "delete", "cluster", "--name", "bench-kind-raw", "--kubeconfig", str(kubeconfig)],
                           env=env, capture_output=True)
    remove_kind_network_if_unused()
    return elapsed


def _time_to_running(core: client.CoreV1Api, pod: dict) -> float:
    name = pod["metadata"]["name"]
    started = time.monotonic()
    core.create_namespaced_pod("default", pod)
    for event in watch.Watch().stream(core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=120):
        if event["object"].status.phase == "Running":
            return time.monotonic() - started
    raise RuntimeError(f"pod {name} not Running within 120s")


def pods_to_running(minor: str) -> dict[str, float]:
    """Seconds from create to Running: a pod without a claim, and one claiming a whole H100."""
    from fake_gpus.driver.identity import current_identity

    identity = current_identity()
    cluster = cluster_for("kind", "bench-kind-pod")
    cluster.create(ClusterSpec(name=cluster.name, k8s=minor, layout=LAYOUT), force=True)
    try:
        image = ensure_workload_image()
        cluster.load_images(image, workers_only=True)
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        request = {"name": "gpu", "exactly": {"deviceClassName": identity.gpu_class}}
        client.ResourceV1Api(api).create_namespaced_resource_claim_template("default", {
            "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": "one-gpu"},
            "spec": {"spec": {"devices": {"requests": [request]}}}})

        def pod(claim: bool) -> dict:
            spec = {"nodeSelector": {"dra-testbed.io/layout-node": "gpu-0"}, "terminationGracePeriodSeconds": 1,
                    "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "args": ["--sleep"]}]}
            if claim:
                spec["containers"][0]["resources"] = {"claims": [{"name": "gpu"}]}
                spec["resourceClaims"] = [{"name": "gpu", "resourceClaimTemplateName": "one-gpu"}]
            return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"bench-{uuid.uuid4().hex[:6]}"}, "spec": spec}

        result = {"no_claim": _time_to_running(core, pod(False)), "whole_gpu_claim": _time_to_running(core, pod(True))}
        api.close()
        return result
    finally:
        cluster.delete()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--k8s", default="1.34")
    parser.add_argument("--image-build", action="store_true")
    parser.add_argument("--pods-only", action="store_true", help="only the pod-to-Running figures")
    parser.add_argument("--no-pods", action="store_true", help="leave out the pod-to-Running figures")
    args = parser.parse_args()
    ensure_engine()
    result: dict = {}
    if args.image_build:
        started = time.monotonic()
        image = ensure_node_image(args.k8s, prefer_kindest=False, rebuild=True).reference
        result["node_image_build_s"] = round(time.monotonic() - started, 1)
    image = ensure_node_image(args.k8s, prefer_kindest=False).reference
    size = int(docker("image", "inspect", image, "--format", "{{.Size}}").stdout.strip())
    result.update(image=image, image_size_mib=round(size / 2**20))
    # warm, as after a first `up`: both are built only when the tree (or the node image) changed
    ensure_worker_image(image, [ensure_driver_image(args.k8s)])
    if args.pods_only:
        print(json.dumps({k: round(v, 2) for k, v in pods_to_running(args.k8s).items()}, indent=2))
        return
    ups, raws, cold_raws = [], [], []
    for _ in range(args.rounds):
        ups.append(timed_up(args.k8s))
        cold_raws.append(timed_raw_kind(args.k8s, image, start_engine=True))
        raws.append(timed_raw_kind(args.k8s, image, start_engine=False))
    stop_engine_if_idle()
    up_m, raw_m, cold_m = (statistics.median(x) for x in (ups, raws, cold_raws))
    result.update(up_s=[round(x, 1) for x in ups], up_median_s=round(up_m, 1),
                  raw_kind_engine_started_s=[round(x, 1) for x in cold_raws], raw_kind_engine_started_median_s=round(cold_m, 1),
                  raw_kind_engine_running_s=[round(x, 1) for x in raws], raw_kind_engine_running_median_s=round(raw_m, 1),
                  ratio_vs_engine_started=round(up_m / cold_m, 2), ratio_vs_engine_running=round(up_m / raw_m, 2),
                  goal="ratio_vs_engine_running <= 1.2")
    print(json.dumps(result, indent=2), flush=True)
    if not args.no_pods:
        print(json.dumps({"pod_to_running_s": {k: round(v, 2) for k, v in pods_to_running(args.k8s).items()}}, indent=2))

if __name__ == "__main__":
    main()
