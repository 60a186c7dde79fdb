"""Benchmark: the API server's CPU to accept one of our ResourceSlices, by encoding, credential and policy.

Why: publishing a large fleet is bound by the control plane's CPU, not the publisher's
(benchmarks/publish_scale.py prints that floor). This says what the apiserver spends per slice and which
part of it a publisher could still change. One KWOK bed (one node of 8 GPUs in dynamic MIG, the
large-fleet settings), the node's slices as our publisher wrote them used as templates, the publisher then
stopped. Each round creates the same slices under fresh pool names (`--pools` pools of the node's slice
count) from 8 threads, in one of these variants, and deletes them again:

  json            JSON body and response, as our publisher sends them; the cluster admin's certificate
  json-node       the same with the node's own token, as the publisher runs by default
  pb-node         protobuf body and response (the encoding client-go's core components use), node token
  json-nopolicy   `json` with the binding of the per-node identity policy removed for the round (what that
                  ValidatingAdmissionPolicy costs: it is evaluated for every writer, admin included)

The figure is the apiserver's CPU time (utime + stime from /proc) per slice; each variant's median over the
rounds is printed as a ratio against `json`, run in the same script. The protobuf messages are built from
the JSON with stubs generated at run time from the k8s.io/api Go module of the bed's minor (as the
kubelet plugin's are: fake_gpus/driver/kubeletplugin/protos.py), before the timing starts.

    python benchmarks/slice_write_cost.py [--k8s 1.34] [--board h100-80gb] [--pools 250] [--rounds 2]
                                          [--variants json,json-node,pb-node,json-nopolicy] [--profile DIR]
"""

from __future__ import annotations

import argparse
import copy
import importlib
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from filelock import FileLock

from fake_gpus.driver.credentials import NodeIdentity, NodeTokens
from fake_gpus.driver.kubeletplugin.protos import go_module_dir
from fake_gpus.driver.paging import pages
from fake_gpus.machine import launch
from hostenv.dirs import cache_root
from hostenv.versions import release_for
from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT
from testbed.clusters.kwok import KwokCluster
from testbed.clusters.layout import Layout, Mode, NodeSpec

SLICES = "/apis/resource.k8s.io/v1/resourceslices"
BINDINGS = "/apis/admissionregistration.k8s.io/v1/validatingadmissionpolicybindings"
JSON, PROTOBUF = "application/json", "application/vnd.kubernetes.protobuf"
VARIANTS = ("json", "json-node", "pb-node", "json-nopolicy")
# the .proto files resource.k8s.io/v1 needs, by module
PROTOS = {"k8s.io/api": ("resource/v1/generated.proto", "core/v1/generated.proto"),
          "k8s.io/apimachinery": ("pkg/api/resource/generated.proto", "pkg/apis/meta/v1/generated.proto",
                                  "pkg/runtime/generated.proto", "pkg/runtime/schema/generated.proto",
                                  "pkg/util/intstr/generated.proto")}


def api_protos(version: str) -> Path:
    """Python modules of resource.k8s.io/v1 for staging `version` (v0.34.4), generated once into the cache."""
    final = cache_root() / "protos" / f"api-{version}"
    if (final / "complete").exists():
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if (final / "complete").exists():
            return final
        from grpc_tools import protoc

        work = Path(tempfile.mkdtemp(prefix=f".api-{version}.", dir=final.parent))
        try:
            files = []
            for module, paths in PROTOS.items():
                source = go_module_dir(module, version)
                for rel in paths:  # copied under their import paths (k8s.io/api/...), which the files use
                    (work / "src" / module / rel).parent.mkdir(parents=True, exist_ok=True)
                    shutil.copy(source / rel, work / "src" / module / rel)
                    files.append(f"{module}/{rel}")
            include = Path(protoc.__file__).resolve().parent / "_proto"
            (work / "py").mkdir()
            if protoc.main(["grpc_tools.protoc", f"-I{work / 'src'}", f"-I{include}", f"--python_out={work / 'py'}", *files]) != 0:
                raise SystemExit(f"error: grpc_tools.protoc failed on the resource.k8s.io/v1 protos of k8s.io/api@{version}")
            (work / "complete").write_text(version + "\n")
            shutil.rmtree(final, ignore_errors=True)
            work.rename(final)
        finally:
            shutil.rmtree(work, ignore_errors=True)
    return final


def _wrap_quantities(value: object, key: str | None = None) -> None:
    """resource.Quantity is a bare string in JSON and a message {string} in protobuf."""
    if isinstance(value, dict):
        if key in ("capacity", "counters"):
            for entry in value.values():
                if isinstance(entry.get("value"), str):
                    entry["value"] = {"string": entry["value"]}
        for k, v in value.items():
            _wrap_quantities(v, k)
    elif isinstance(value, list):
        for v in value:
            _wrap_quantities(v, key)


class Protobuf:
    """JSON slices to the apiserver's protobuf envelope ("k8s\\0" + runtime.Unknown around the object)."""

    def __init__(self, version: str) -> None:
        path = str(api_protos(version) / "py")
        if path not in sys.path:
            sys.path.append(path)
        from google.protobuf import json_format

        self.json_format = json_format
        self.v1 = importlib.import_module("k8s.io.api.resource.v1.generated_pb2")
        self.runtime = importlib.import_module("k8s.io.apimachinery.pkg.runtime.generated_pb2")

    def encode(self, body: dict) -> bytes:
        body = copy.deepcopy(body)
        body.pop("apiVersion", None)
        body.pop("kind", None)
        _wrap_quantities(body)
        message = self.json_format.ParseDict(body, self.v1.ResourceSlice())
        unknown = self.runtime.Unknown(typeMeta=self.runtime.TypeMeta(apiVersion="resource.k8s.io/v1", kind="ResourceSlice"),
                                       raw=message.SerializeToString(), contentEncoding="", contentType="")
        return b"k8s\x00" + unknown.SerializeToString()


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(k8s: str, board: str, pools: int, rounds: int, variants: list[str], profile: Path | None) -> dict[str, float]:
    name = f"bench-{uuid.uuid4().hex[:6]}"
    cluster = KwokCluster(name)
    layout = Layout((NodeSpec("seed", board, 8 if not board.startswith("gb200") else 4, Mode("dynamic-mig")),))
    per_slice: dict[str, list[float]] = {v: [] for v in variants}
    try:
        cluster.create(ClusterSpec(name=name, k8s=k8s, layout=layout, allow_large=True))
        api = cluster.api_client()
        from kubernetes import client

        templates = list(pages(client.ResourceV1Api(api).list_resource_slice))
        launch.stop_publisher(cluster.home)
        devices = sum(len(t["spec"].get("devices") or []) for t in templates)
        print(f"Kubernetes {k8s}, {len(templates)} slices of node `seed` ({board} in dynamic MIG) as templates: {devices} devices, "
              f"{sum(len(json.dumps(t, separators=(',', ':'))) for t in templates) // len(templates)} bytes of JSON per slice", flush=True)
        encoder = Protobuf(release_for(k8s).staging) if "pb-node" in variants else None
        tokens = NodeTokens(api, NodeIdentity(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))
        bearer = tokens.bearer("seed", None)
        admin, anonymous, host = api.rest_client.pool_manager, tokens.api.rest_client.pool_manager, api.configuration.host
        apiserver = dict(cluster.pids())["kube-apiserver"]
        binding = json.loads(admin.request("GET", f"{host}{BINDINGS}", headers={"Accept": JSON}).data)["items"][0]
        binding_path = f"{host}{BINDINGS}/{binding['metadata']['name']}"
        for round_no in range(rounds):
            for variant in variants:
                label = f"r{round_no}-{variant}"
                bodies = []
                for i in range(pools):
                    for template in templates:
                        body = copy.deepcopy(template)
                        body["metadata"] = {"name": f"{label}-{i}-{template['metadata']['name']}", "labels": {"bench": label}}
                        body["spec"]["pool"] = {"name": f"{label}-{i}", "generation": 1, "resourceSliceCount": len(templates)}
                        bodies.append(encoder.encode(body) if variant == "pb-node" else json.dumps(body, separators=(",", ":")).encode())
                encoding = PROTOBUF if variant == "pb-node" else JSON
                node = variant.endswith("-node")
                headers = {"Content-Type": encoding, "Accept": encoding, **({"authorization": bearer} if node else {})}
                pool = anonymous if node else admin
                if variant == "json-nopolicy":
                    assert admin.request("DELETE", binding_path).status == 200
                    time.sleep(3)  # the policy plugin learns of the binding through an informer

                def send(body: bytes) -> None:
                    response = pool.request("POST", f"{host}{SLICES}", body=body, headers=headers)
                    if response.status != 201:
                        raise SystemExit(f"error: {variant}: {response.status} {response.data[:300]!r}")

                grab = None
                if profile:
                    def save() -> None:
                        data = admin.request("GET", f"{host}/debug/pprof/profile?seconds=15", timeout=60).data
                        profile.mkdir(parents=True, exist_ok=True)
                        (profile / f"{label}.pprof").write_bytes(data)
                    grab = threading.Thread(target=save)
                    grab.start()
                before, started = cpu_seconds(apiserver), time.monotonic()
                with ThreadPoolExecutor(8) as workers:
                    list(workers.map(send, bodies))
                wall, used = time.monotonic() - started, cpu_seconds(apiserver) - before
                if grab:
                    grab.join()
                if variant == "json-nopolicy":
                    restored = {k: v for k, v in binding.items() if k != "status"}
                    restored["metadata"] = {"name": binding["metadata"]["name"], "labels": binding["metadata"].get("labels", {})}
                    assert admin.request("POST", f"{host}{BINDINGS}", body=json.dumps(restored).encode(),
                                         headers={"Content-Type": JSON}).status == 201
                if variant == "pb-node":  # what protobuf stored is what JSON says: nothing lost in the encoding
                    stored = admin.request("GET", f"{host}{SLICES}/{label}-0-{templates[0]['metadata']['name']}", headers={"Accept": JSON})
                    first = json.loads(stored.data)
                    expected = dict(templates[0]["spec"], pool={"name": f"{label}-0", "generation": 1, "resourceSliceCount": len(templates)})
                    if first["spec"] != expected:
                        raise SystemExit("error: a slice sent as protobuf was stored unlike its JSON: the encoding lost something")
                per_slice[variant].append(1000 * used / len(bodies))
                print(f"  round {round_no + 1} {variant:14s} {len(bodies)} slices in {wall:5.1f} s: apiserver {used:5.1f} CPU-s, "
                      f"{per_slice[variant][-1]:5.2f} ms per slice ({sum(map(len, bodies)) // len(bodies)} bytes sent each)", flush=True)
                deleted = admin.request("DELETE", f"{host}{SLICES}?labelSelector=bench%3D{label}", headers={"Accept": JSON})
                assert deleted.status == 200, deleted.status
                time.sleep(5)  # the deletions' watch events and garbage settle before the next round
        medians = {v: statistics.median(values) for v, values in per_slice.items()}
        baseline = medians.get("json")
        for variant, value in medians.items():
            ratio = f", ratio to json {value / baseline:.2f}" if baseline else ""
            print(f"{variant:14s} median {value:5.2f} ms of apiserver CPU per slice{ratio}", flush=True)
        return medians
    finally:
        cluster.delete()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k8s", default="1.34")
    parser.add_argument("--board", default="h100-80gb")
    parser.add_argument("--pools", type=int, default=250, help="pools created per round and variant")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--profile", type=Path, help="save the apiserver's CPU profile of each round here")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants or args.pools < 1 or args.rounds < 1:
        parser.error(f"--variants takes a comma-separated list of {', '.join(VARIANTS)} (got {args.variants!r}); "
                     "--pools and --rounds at least 1")
    run(args.k8s, args.board, args.pools, args.rounds, variants, args.profile)


if __name__ == "__main__":
    main()
