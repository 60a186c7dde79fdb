"""Benchmark: warm `dra-testbed up` (to schedulable) against raw `kwokctl create cluster`, and `down`.

The fair baseline is raw kwokctl plus kubectl creating the same Node objects and waiting until they are
Ready (the end point `up` reaches, slices aside); raw kwokctl alone is shown too.

Both use the same cached binaries in the same run, alternating, so machine noise hits both alike.
`--cold` first measures a cold toolchain build into a fresh cache (several minutes) and its disk use.

    python benchmarks/kwok_up.py [--rounds 5] [--cold]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostenv.processes import run_child
from testbed.clusters.base import ClusterSpec
from testbed.clusters.registry import cluster_for
from testbed.clusters.features import as_flag, feature_gates, runtime_config
from testbed.clusters.kwok import BINARIES, node_object
from testbed.clusters.layout import load_layout
from testbed.toolchain.resolve import ensure

LAYOUT = Path(__file__).resolve().parent.parent / "clusters" / "layouts" / "mixed-h100-b200.yaml"


def du(path: Path) -> int:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file() and not p.is_symlink()) if path.exists() else 0


def cold_build(minor: str) -> None:
    """Build the whole toolchain into an empty cache (fresh Go module and build caches too)."""
    with tempfile.TemporaryDirectory(prefix="dra-testbed-cold-") as tmp:
        env = dict(os.environ, DRA_TESTBED_CACHE=tmp, DRA_TESTBED_OFFLINE="1")
        started = time.monotonic()
        subprocess.run([sys.executable, "-m", "testbed.cli", "toolchain", "ensure", "--k8s", minor], env=env, check=True,
                       stdout=subprocess.DEVNULL)
        elapsed = time.monotonic() - started
        root = Path(tmp)
        print(f"cold toolchain build ({minor}): {elapsed:.0f}s")
        for part in ("toolchain", "go/mod", "go/build"):
            print(f"  disk {part}: {du(root / part) / 2**30:.2f} GiB")
        subprocess.run(["chmod", "-R", "u+w", tmp], check=False)  # the Go module cache is read-only


def raw_kwokctl(name: str, minor: str, workdir: Path, nodes: bool) -> float:
    """Seconds for plain `kwokctl create cluster --wait` with the same binaries and gates; with `nodes`,
    then also `kubectl apply` of the layout's Node objects and `kubectl wait` until they are Ready: the
    end point `up` reaches too (short of slices, which raw kwokctl has no way to publish)."""
    tc = ensure(minor, BINARIES)
    env = dict(os.environ, KWOK_WORKDIR=str(workdir))
    kubeconfig = workdir / f"{name}.kubeconfig"
    args = [
        str(tc.path("kwokctl")), "create", "cluster", "--name", name, "--runtime", "binary", "--kubeconfig", str(kubeconfig),
        "--kube-apiserver-binary", str(tc.path("kube-apiserver")),
        "--kube-controller-manager-binary", str(tc.path("kube-controller-manager")),
        "--kube-scheduler-binary", str(tc.path("kube-scheduler")),
        "--etcd-binary", str(tc.path("etcd")), "--kwok-controller-binary", str(tc.path("kwok")),
        "--kube-feature-gates", as_flag(feature_gates(minor)), "--kube-runtime-config", as_flag(runtime_config(minor)),
        "--disable-qps-limits", "--wait", "120s",
    ]
    manifest = workdir / "nodes.json"
    manifest.write_text(json.dumps({"apiVersion": "v1", "kind": "List", "items": [node_object(n) for n in load_layout(LAYOUT).nodes]}))
    kubectl = [str(ensure(minor, ["kubectl"]).path("kubectl")), "--kubeconfig", str(kubeconfig)]
    started = time.monotonic()
    subprocess.run(args, env=env, check=True, capture_output=True)
    if nodes:
        subprocess.run([*kubectl, "apply", "-f", str(manifest)], check=True, capture_output=True)
        subprocess.run([*kubectl, "wait", "--for=condition=Ready", "node", "--all", "--timeout=120s"], check=True, capture_output=True)
    elapsed = time.monotonic() - started
    subprocess.run([str(tc.path("kwokctl")), "delete", "cluster", "--name", name, "--kubeconfig", str(kubeconfig)], env=env,
                   check=True, capture_output=True)
    return elapsed


def ours(name: str, minor: str) -> tuple[float, float]:
    """Seconds for `up` to schedulable (nodes Ready, slices published) and for `down`, in this process."""
    cluster = cluster_for("kwok", name)
    spec = ClusterSpec(name=name, k8s=minor, layout=load_layout(LAYOUT))
    started = time.monotonic()
    cluster.create(spec, force=True)
    up = time.monotonic() - started
    started = time.monotonic()
    cluster.delete()
    return up, time.monotonic() - started


def ours_cli(name: str, minor: str) -> float:
    """Seconds for the `dra-testbed up` command a user runs: the same, plus Python's start-up and imports."""
    cli = [sys.executable, "-m", "testbed.cli"]
    started = time.monotonic()
    run_child([*cli, "up", "--name", name, "--k8s", minor, "--layout", str(LAYOUT)], check=True, capture_output=True)
    elapsed = time.monotonic() - started
    subprocess.run([*cli, "down", "--name", name], check=True, capture_output=True)
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--k8s", default="1.34")
    parser.add_argument("--cold", action="store_true", help="also measure a cold toolchain build (minutes)")
    args = parser.parse_args()
    if args.cold:
        cold_build(args.k8s)
    ensure(args.k8s, BINARIES)  # warm: everything below uses the cached binaries
    workdir = Path(tempfile.mkdtemp(prefix="kwok-raw-"))
    raw, raw_nodes, up, cli, down = [], [], [], [], []
    try:
        for round_ in range(args.rounds):
            raw.append(raw_kwokctl(f"bench-raw-{round_}", args.k8s, workdir, nodes=False))
            raw_nodes.append(raw_kwokctl(f"bench-rawn-{round_}", args.k8s, workdir, nodes=True))
            u, d = ours(f"bench-ours-{round_}", args.k8s)
            up.append(u)
            down.append(d)
            cli.append(ours_cli(f"bench-cli-{round_}", args.k8s))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    raw_m, raw_n, up_m, cli_m = (statistics.median(x) for x in (raw, raw_nodes, up, cli))

    def row(label: str, xs: list[float]) -> str:
        return f"{label:<38} median {statistics.median(xs):.2f}s  (all: {', '.join(f'{x:.2f}' for x in xs)})"

    print(f"rounds: {args.rounds}, layout: {LAYOUT.name}, Kubernetes {args.k8s}")
    print(row("raw kwokctl create cluster --wait:", raw))
    print(row("  + kubectl apply nodes, wait Ready:", raw_nodes))
    print(row("up to schedulable (KwokCluster.create):", up))
    print(row("`dra-testbed up` command:", cli))
    print(row("down (KwokCluster.delete):", down))
    print(f"ratio over raw kwokctl alone: create {up_m / raw_m:.2f}, `dra-testbed up` {cli_m / raw_m:.2f}")
    print(f"ratio over raw kwokctl + the same nodes Ready (the same end point): create {up_m / raw_n:.2f}, "
          f"`dra-testbed up` {cli_m / raw_n:.2f} (goal: at most 1.2)")


if __name__ == "__main__":
    main()
