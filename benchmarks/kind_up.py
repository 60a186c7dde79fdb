"""Benchmark: warm `up --backend kind` vs raw `kind create cluster` on the same node image, and a pod
to Running.

Both bring up a control plane + one worker from the same (already built) node image in the same run,
alternating. "pod to Running" times a pod of the workload image (pull policy Never, no claim) from
create to phase Running on the worker. `--image-build` first times a node-image build from the
current cache (cold only if the cache is empty) and reports the image size.

    python benchmarks/kind_up.py [--rounds 2] [--k8s 1.34] [--image-build]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
import uuid
from pathlib import Path

from kubernetes import client, watch

from testbed.clusters.base import ClusterSpec
from testbed.clusters.kind import KindCluster
from testbed.clusters.kind.network import remove_kind_network_if_unused
from testbed.clusters.layout import from_flags
from testbed.clusters.kind.dockerd import docker, ensure_engine
from testbed.clusters.kind.node_image import ensure_node_image
from testbed.clusters.kind.driver_image import ensure_workload_image
from testbed.toolchain.resolve import ensure

LAYOUT = from_flags(["gpu-0=h100-80gb:1:whole"])


def timed_up(minor: str) -> float:
    cluster = KindCluster("bench-kind-up")
    started = time.monotonic()
    cluster.create(ClusterSpec(name=cluster.name, k8s=minor, layout=LAYOUT), force=True)
    elapsed = time.monotonic() - started
    cluster.delete()
    return elapsed


def timed_raw_kind(minor: str, image: str) -> float:
    kind = ensure(minor, ["kind"]).path("kind")
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "kind.yaml"
        config.write_text("kind: Cluster\napiVersion: kind.x-k8s.io/v1alpha4\nnodes:\n- role: control-plane\n- role: worker\n"
                          "networking:\n  disableDefaultCNI: true\n")
        env = dict(os.environ, KIND_EXPERIMENTAL_PROVIDER="docker")
        started = time.monotonic()
        # --wait covers the control plane only; without a CNI config nodes stay NotReady, so this is
        # kind's own floor: containers up, kubeadm init and join done
        subprocess.run([str(kind), "create", "cluster", "--name", "bench-kind-raw", "--image", image, "--config", str(config),
                        "--kubeconfig", str(Path(tmp) / "kubeconfig")], env=env, check=True, capture_output=True)
        elapsed = time.monotonic() - started
        subprocess.run([str(kind), "delete", "cluster", "--name", "bench-kind-raw", "--kubeconfig", str(Path(tmp) / "kubeconfig")],
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
    cluster = KindCluster("bench-kind-pod")
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
    if args.pods_only:
        print(json.dumps({k: round(v, 2) for k, v in pods_to_running(args.k8s).items()}, indent=2))
        return
    ups, raws = [], []
    for _ in range(args.rounds):
        ups.append(timed_up(args.k8s))
        raws.append(timed_raw_kind(args.k8s, image))
    result.update(up_s=[round(x, 1) for x in ups], up_median_s=round(statistics.median(ups), 1),
                  raw_kind_s=[round(x, 1) for x in raws], raw_kind_median_s=round(statistics.median(raws), 1),
                  pod_to_running_s={k: round(v, 2) for k, v in pods_to_running(args.k8s).items()})
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
