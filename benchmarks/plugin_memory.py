"""Memory per simulated node of our kubelet plugin with prepare on: a process per node against one plugin host.

    python benchmarks/plugin_memory.py [--nodes 10,50,200] [--per-node-max 50] [--k8s 1.34]

Brings up a KWOK cluster (real apiserver, holds the claims) and N fake nodes of 8 H100s each (dynamic MIG).
For each N: the plugins started as the stand-in kubelet starts them (testbed.kubelet: a process per node, or
every node handed to one host, fake_gpus.driver.kubeletplugin.multinode), one MIG 1g.10gb claim prepared on
every node over its own sockets as the kubelet would, then RSS and PSS summed over the plugin processes
(/proc/<pid>/smaps_rollup) and divided by N. The baseline is the per-node processes in the same run (up to
--per-node-max nodes: each costs a whole interpreter); the ratio is per-node MiB over host MiB at the same N
where both ran, else against the largest per-node run. Extrapolated to the trace's fleet (1,213 nodes), said
so. Everything started is stopped and removed at the end, also on failure.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
import uuid
from pathlib import Path

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
from testbed.clusters.layout import from_flags  # noqa: E402
from testbed.clusters.registry import cluster_for  # noqa: E402
from testbed.kubelet.plugin_host import PLUGIN_MODULE, Hosts, HostedStarter  # noqa: E402
from testbed.kubelet.process import OnDemand  # noqa: E402

DRIVER = current_identity().driver
NAMESPACE = "plugin-memory"
DEVICE = "gpu-0-mig-1g10gb-19-0"
FLEET = 1213  # nodes of the Alibaba 2023 trace's cluster
START_TIMEOUT = 600.0


def memory_kib(pid: int) -> tuple[int, int]:
    """(RSS, PSS) of a process in KiB."""
    fields = {}
    for line in Path(f"/proc/{pid}/smaps_rollup").read_text().splitlines()[1:]:
        name, _, rest = line.partition(":")
        fields[name] = int(rest.split()[0])
    return fields["Rss"], fields["Pss"]


def claim(api, node: str) -> ClaimId:
    resource = client.ResourceV1Api(api)
    body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"generateName": "mem-"},
            "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": f"mig.{DRIVER.split('.', 1)[1]}"}}]}}}
    made = resource.create_namespaced_resource_claim(NAMESPACE, body)
    results = [{"request": "gpu", "driver": DRIVER, "pool": node, "device": DEVICE}]
    resource.patch_namespaced_resource_claim_status(made.metadata.name, NAMESPACE, {"status": {"allocation": {"devices": {"results": results}}}})
    return ClaimId(NAMESPACE, made.metadata.uid, made.metadata.name)


def plugin_argv(root: Path, node: str, kubeconfig: Path) -> list[str]:
    return [sys.executable, "-m", PLUGIN_MODULE, "--node-name", node, "--state-dir", str(root / "nvml"),
            "--nvml-lib-dir", str(ensure_library()), "--plugin-dir", str(root / "plugin"),
            "--registry-dir", str(root / "registry"), "--cdi-dir", str(root / "cdi"), "--kubeconfig", str(kubeconfig),
            "--mig", "dynamic"]


def run(approach: str, n: int, work: Path, kubeconfig: Path, api) -> tuple[float, float, float]:
    """Start n nodes' plugins one way, prepare a claim on each; (RSS MiB, PSS MiB per node, seconds to prepare all)."""
    work.mkdir(parents=True)
    nodes = [f"mem-{approach}-{i}" for i in range(n)]
    roots = {node: work / str(i) for i, node in enumerate(nodes)}
    for root in roots.values():
        state.create_state_dir(root / "nvml", [("h100-80gb", 8)])
    hosts = Hosts(work / "plugins")
    procs = []
    try:
        t0 = time.monotonic()
        for node, root in roots.items():
            how = OnDemand(plugin_argv(root, node, kubeconfig), str(root / "plugin.log"), registry=str(root / "registry"),
                           host="h0" if approach == "host" else "")
            if approach == "host":
                HostedStarter(node, how, hosts).starting()
            else:
                procs.append(how.start(root / "plugin.pid"))
        for node, root in roots.items():
            socket = root / "registry" / f"{DRIVER}-reg.sock"
            while not socket.exists():
                if time.monotonic() - t0 > START_TIMEOUT:
                    raise RuntimeError(f"{approach}: {node}'s plugin did not start (see {root / 'plugin.log'})")
                time.sleep(0.1)
            with KubeletClient(socket, root / "plugin" / "dra.sock") as k:
                k.get_info()
                c = claim(api, node)
                error = k.prepare([c]).claims[c.uid].error
                if error:
                    raise RuntimeError(f"{approach}: {node}: {error}")
        elapsed = time.monotonic() - t0
        time.sleep(1.0)
        pids = [p.pid for p in procs] + [p.pid for p in hosts.procs.values()]
        rss, pss = (sum(x) for x in zip(*(memory_kib(pid) for pid in pids)))
        return rss / 1024 / n, pss / 1024 / n, elapsed
    finally:
        hosts.stop_all()
        for p in procs:
            terminate(p.pid)
            p.wait()


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="10,50,200", help="comma-separated fleet sizes")
    parser.add_argument("--per-node-max", type=int, default=50, help="largest fleet the per-node baseline runs at")
    parser.add_argument("--k8s", default=DEFAULT_MINOR)
    args = parser.parse_args()
    try:
        sizes = [int(s) for s in args.nodes.split(",")]
        assert sizes and all(s > 0 for s in sizes)
    except (ValueError, AssertionError):
        print(f"error: --nodes {args.nodes!r}: expected positive integers separated by commas", file=sys.stderr)
        return 2
    load(args.k8s)
    root = Path(tempfile.mkdtemp(prefix="plg-mem-", dir="/tmp"))
    cluster = cluster_for("kwok", f"plg-mem-{uuid.uuid4().hex[:6]}")
    rows: dict[tuple[str, int], tuple[float, float, float]] = {}
    try:
        kubeconfig = cluster.create(ClusterSpec(name=cluster.name, k8s=args.k8s, layout=from_flags(["mem-anchor=h100-80gb:1:whole"])))
        api = cluster.api_client()
        client.CoreV1Api(api).create_namespace(body={"metadata": {"name": NAMESPACE}})
        for n in sizes:
            for approach in ("per-node", "host"):
                if approach == "per-node" and n > args.per_node_max:
                    continue
                rows[(approach, n)] = run(approach, n, root / f"{approach}-{n}", kubeconfig, api)
                rss, pss, secs = rows[(approach, n)]
                print(f"  {approach:8} {n:5} nodes: {rss:7.2f} MiB RSS/node, {pss:7.2f} MiB PSS/node, prepared all in {secs:6.1f} s",
                      flush=True)
        api.close()
    finally:
        cluster.delete()
        shutil.rmtree(root, ignore_errors=True)
    print(f"plugin memory per simulated node with one MIG claim prepared each (8 x H100, dynamic MIG), Kubernetes {args.k8s}")
    baseline = max((n for a, n in rows if a == "per-node"), default=None)
    for (approach, n), (rss, pss, _secs) in sorted(rows.items(), key=lambda r: (r[0][1], r[0][0])):
        base = rows.get(("per-node", n)) or (rows[("per-node", baseline)] if baseline else None)
        ratio = f"  ({base[1] / pss:5.1f}x less PSS than a process per node)" if base and approach == "host" else ""
        print(f"{approach:8} {n:5} nodes  {rss:7.2f} MiB RSS  {pss:7.2f} MiB PSS per node{ratio}")
    hosted = sorted(n for a, n in rows if a == "host")
    if len(hosted) >= 2:  # a host's total: a fixed interpreter plus a cost per node, from its two largest runs
        (n1, n2), totals = hosted[-2:], [rows[("host", n)][1] * n for n in hosted[-2:]]
        marginal = (totals[1] - totals[0]) / (n2 - n1)
        fleet = totals[1] + marginal * (FLEET - n2)
        print(f"extrapolated (not measured) to the trace's {FLEET} nodes: a host {fleet / 1024:.2f} GiB PSS "
              f"({marginal:.2f} MiB more per node, from {n1} and {n2} nodes)"
              + (f"; a process per node {rows[('per-node', baseline)][1] * FLEET / 1024:.1f} GiB" if baseline else ""))
    return 0


if __name__ == "__main__":
    sys.exit(main())
