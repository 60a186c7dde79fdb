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
from testbed.clusters.kind import KindCluster, remove_kind_network_if_unused
from testbed.clusters.layout import from_flags
from testbed.docker.engine import docker, ensure_engine
from testbed.images.build import ensure_node_image
from testbed.images.extra import ensure_workload_image
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


def pod_to_running(minor: str) -> float:
    cluster = KindCluster("bench-kind-pod")
    cluster.create(ClusterSpec(name=cluster.name, k8s=minor, layout=LAYOUT), force=True)
    try:
        cluster.load_images(ensure_workload_image())
        api = cluster.api_client()
        core = client.CoreV1Api(api)
        name = f"bench-{uuid.uuid4().hex[:6]}"
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
               "spec": {"nodeSelector": {"dra-testbed.io/layout-node": "gpu-0"}, "terminationGracePeriodSeconds": 1,
                        "containers": [{"name": "main", "image": ensure_workload_image(), "imagePullPolicy": "Never", "args": ["--sleep"]}]}}
        started = time.monotonic()
        core.create_namespaced_pod("default", pod)
        for event in watch.Watch().stream(core.list_namespaced_pod, "default", field_selector=f"metadata.name={name}", timeout_seconds=120):
            if event["object"].status.phase == "Running":
                break
        elapsed = time.monotonic() - started
        api.close()
        return elapsed
    finally:
        cluster.delete()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--k8s", default="1.34")
    parser.add_argument("--image-build", action="store_true")
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
    ups, raws = [], []
    for _ in range(args.rounds):
        ups.append(timed_up(args.k8s))
        raws.append(timed_raw_kind(args.k8s, image))
    result.update(up_s=[round(x, 1) for x in ups], up_median_s=round(statistics.median(ups), 1),
                  raw_kind_s=[round(x, 1) for x in raws], raw_kind_median_s=round(statistics.median(raws), 1),
                  pod_to_running_s=round(pod_to_running(args.k8s), 2))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
