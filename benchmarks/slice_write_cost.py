"""Benchmark: the API server's CPU to accept one of our ResourceSlices, by encoding, credential and policy.

Why: publishing a large fleet is bound by the control plane's CPU, not the publisher's
(benchmarks/publish_scale.py prints that floor). This says what the apiserver spends per slice and which
part of it a publisher could still change. One KWOK bed (one node of 8 GPUs in dynamic MIG, the
large-fleet settings), the node's slices as our publisher wrote them used as templates, the publisher then
stopped. Each round runs every variant in turn (in an order rotated per round), creating the same slices under
fresh pool names (`--pools` pools of the node's slices, labels and owner kept) from 8 threads, then deleting
them:

  json            JSON body and response, as our publisher sends them; the cluster admin's certificate
  json-node       the same with the node's own token, as the publisher runs by default
  pb-node         protobuf body and response (the encoding client-go's core components use), node token
  json-nopolicy   `json` with the binding of the per-node identity policy removed for the round (what that
                  ValidatingAdmissionPolicy costs: it is evaluated for every writer, admin included)

The figure is the apiserver's CPU time (utime + stime from /proc) per slice, less its idle rate measured just
before over the round's wall time; each variant's median over the rounds is printed as a ratio against
`json`, run in the same script. The protobuf messages are built from
the JSON with stubs generated at run time from the k8s.io/api Go module of the bed's minor (as the
kubelet plugin's are: fake_gpus/driver/kubeletplugin/protos.py), before the timing starts.

    python benchmarks/slice_write_cost.py [--k8s 1.34] [--board h100-80gb] [--pools 250] [--rounds 2]
                                          [--variants json,json-node,pb-node,json-nopolicy] [--profile DIR]
"""

from __future__ import annotations

import argparse
import contextlib
import copy
import importlib
import json
import shutil
import statistics
import sys
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from fake_gpus.driver.credentials import NodeIdentity, NodeTokens
from fake_gpus.driver.kubeletplugin.protos import ProtoBuildError, build_once, go_module_dir, proto_include
from fake_gpus.driver.paging import pages
from fake_gpus.machine import launch
from hostenv.dirs import cache_root
from hostenv.versions import UnknownVersionError, release_for
from testbed.clusters.base import ClusterError, ClusterSpec
from testbed.clusters.registry import cluster_for
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT, POLICY_NAME, apply_identity
from testbed.clusters.layout import Layout, LayoutError, Mode, NodeSpec

from publish_scale import background_rate, cpu_seconds  # the benchmark beside this one

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
    def generate(out: Path) -> dict:
        from grpc_tools import protoc

        files = []
        for module, paths in PROTOS.items():
            source = go_module_dir(module, version)
            for rel in paths:  # copied under their import paths (k8s.io/api/...), which the files use
                (out / "src" / module / rel).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy(source / rel, out / "src" / module / rel)
                files.append(f"{module}/{rel}")
        (out / "py").mkdir()
        if protoc.main(["grpc_tools.protoc", f"-I{out / 'src'}", f"-I{proto_include()}", f"--python_out={out / 'py'}", *files]) != 0:
            raise ProtoBuildError(f"grpc_tools.protoc failed on the resource.k8s.io/v1 protos of k8s.io/api@{version}")
        return {"modules": list(PROTOS), "version": version, "files": files}

    return build_once(cache_root() / "protos" / f"api-{version}", generate)


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


def check(response, what: str, *ok: int) -> None:
    if response.status not in (ok or (200,)):
        raise SystemExit(f"error: {what}: HTTP {response.status} {response.data[:300]!r}")


@contextlib.contextmanager
def policy_unbound(api, host: str):
    """The per-node identity policy's binding deleted for the block, applied again after it, whatever happens."""
    check(api.rest_client.pool_manager.request("DELETE", f"{host}{BINDINGS}/{POLICY_NAME}"), f"deleting the binding {POLICY_NAME}")
    try:
        time.sleep(3)  # the policy plugin learns of bindings through an informer
        yield
    finally:
        apply_identity(api)  # creates what is missing from the same manifest `up` applies
        time.sleep(3)


def round_bodies(templates: list[dict], label: str, pools: int, encoder: Protobuf | None) -> list[bytes]:
    """`pools` copies of the node's slices as our publisher wrote them (labels and owner kept), each pool
    under a fresh name; protobuf when `encoder` is given."""
    bodies = []
    for i in range(pools):
        for template in templates:
            body = copy.deepcopy(template)
            meta = template["metadata"]
            body["metadata"] = {"name": f"{label}-{i}-{meta['name']}", "labels": {**meta.get("labels", {}), "bench": label},
                                "ownerReferences": meta.get("ownerReferences", [])}
            body["spec"]["pool"] = {"name": f"{label}-{i}", "generation": 1, "resourceSliceCount": len(templates)}
            bodies.append(encoder.encode(body) if encoder else json.dumps(body, separators=(",", ":")).encode())
    return bodies


def check_stored(admin, host: str, templates: list[dict], label: str) -> None:
    """What protobuf stored is what the JSON says (every slice of one pool): a lossy encoding must not look cheap."""
    for template in templates:
        stored = admin.request("GET", f"{host}{SLICES}/{label}-0-{template['metadata']['name']}", headers={"Accept": JSON})
        check(stored, f"reading back {label}-0-{template['metadata']['name']}")
        expected = dict(template["spec"], pool={"name": f"{label}-0", "generation": 1, "resourceSliceCount": len(templates)})
        if json.loads(stored.data)["spec"] != expected:
            raise SystemExit(f"error: slice {template['metadata']['name']} sent as protobuf was stored unlike its JSON")


def start_profile(admin, host: str, path: Path) -> threading.Thread:
    """The apiserver's CPU profile of the next 15 s, saved to `path` (a daemon thread: a failed run does not wait)."""
    def save() -> None:
        response = admin.request("GET", f"{host}/debug/pprof/profile?seconds=15", timeout=60)
        if response.status == 200:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(response.data)
    thread = threading.Thread(target=save, daemon=True)
    thread.start()
    return thread


def run(k8s: str, board: str, pools: int, rounds: int, variants: list[str], profile: Path | None) -> dict[str, float]:
    encoder = Protobuf(release_for(k8s).staging) if "pb-node" in variants else None  # before the bed: fails sooner
    name = f"bench-{uuid.uuid4().hex[:6]}"
    cluster = cluster_for("kwok", name)
    layout = Layout((NodeSpec("seed", board, 4 if board.startswith("gb200") else 8, Mode("dynamic-mig")),))
    per_slice: dict[str, list[float]] = {v: [] for v in variants}
    try:
        cluster.create(ClusterSpec(name=name, k8s=k8s, layout=layout, allow_large=True))
        api = cluster.api_client()
        from kubernetes import client

        templates = list(pages(client.ResourceV1Api(api).list_resource_slice))
        launch.stop_publisher(cluster.home)
        devices = sum(len(t["spec"].get("devices") or []) for t in templates)
        print(f"Kubernetes {k8s}, {len(templates)} slices of node `seed` ({board} in dynamic MIG) as templates, {devices} devices; "
              f"{pools} pools of them per variant and round", flush=True)
        tokens = NodeTokens(api, NodeIdentity(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))
        bearer = tokens.bearer("seed", None)
        admin, anonymous, host = api.rest_client.pool_manager, tokens.api.rest_client.pool_manager, api.configuration.host
        apiserver = {"kube-apiserver": dict(cluster.pids())["kube-apiserver"]}
        for round_no in range(rounds):
            shift = round_no % len(variants)  # each variant in each position in turn: none always follows the same one
            for variant in variants[shift:] + variants[:shift]:
                label = f"r{round_no}-{variant}"
                bodies = round_bodies(templates, label, pools, encoder if variant == "pb-node" else None)
                encoding = PROTOBUF if variant == "pb-node" else JSON
                node = variant.endswith("-node")
                headers = {"Content-Type": encoding, "Accept": encoding, **({"authorization": bearer} if node else {})}
                pool = anonymous if node else admin

                def send(body: bytes) -> None:
                    check(pool.request("POST", f"{host}{SLICES}", body=body, headers=headers), variant, 201)

                with policy_unbound(api, host) if variant == "json-nopolicy" else contextlib.nullcontext():
                    idle = background_rate(apiserver, seconds=5.0)  # what the round's figure must not count
                    grab = start_profile(admin, host, profile / f"{label}.pprof") if profile else None
                    before, started = cpu_seconds(apiserver), time.monotonic()
                    with ThreadPoolExecutor(8) as workers:
                        list(workers.map(send, bodies))
                    wall = time.monotonic() - started
                    used = sum(cpu_seconds(apiserver).values()) - sum(before.values()) - idle * wall
                    if grab:
                        grab.join()
                if variant == "pb-node":
                    check_stored(admin, host, templates, label)
                per_slice[variant].append(1000 * used / len(bodies))
                print(f"  round {round_no + 1} {variant:14s} {len(bodies)} slices in {wall:5.1f} s: apiserver {used:5.1f} CPU-s "
                      f"(idle {idle:.2f} cores subtracted), {per_slice[variant][-1]:5.2f} ms per slice "
                      f"({sum(map(len, bodies)) // len(bodies)} bytes sent each)", flush=True)
                check(admin.request("DELETE", f"{host}{SLICES}?labelSelector=bench%3D{label}", headers={"Accept": JSON}),
                      f"deleting the slices of {label}")
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
    parser.add_argument("--pools", type=int, default=250, help="pools created per variant and round")
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--variants", default=",".join(VARIANTS), help=f"comma-separated, of: {', '.join(VARIANTS)}")
    parser.add_argument("--profile", type=Path, help="save the apiserver's CPU profile of each round here")
    args = parser.parse_args()
    variants = [v for v in args.variants.split(",") if v]
    unknown = [v for v in variants if v not in VARIANTS]
    if unknown or not variants:
        parser.error(f"--variants: unknown {', '.join(unknown) or 'empty list'}; valid: {', '.join(VARIANTS)}")
    if args.pools < 1 or args.rounds < 1:
        parser.error(f"--pools and --rounds take a whole number of at least 1 (got {args.pools} and {args.rounds})")
    try:
        run(args.k8s, args.board, args.pools, args.rounds, variants, args.profile)
    except (ProtoBuildError, ClusterError, LayoutError, UnknownVersionError) as exc:
        raise SystemExit(f"error: {exc}") from None


if __name__ == "__main__":
    main()
