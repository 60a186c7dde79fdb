"""`dra-testbed gpu fail|heal`: make a fake GPU of a running cluster fail (Xid, ECC error, lost) or heal it.

The fault is appended to the node's fake-NVML state (fake_gpus.nvml.health), from where the library
delivers it to every NVML event set registered on that GPU, in any process (docs/design/health.md).
KWOK keeps each node's state under the cluster's home (`nvml/<node>`); a kind node's is the host folder
`nodes/<layout node>/nvml` of the cluster's home, bind-mounted at /var/lib/dra-testbed/nvml in its container,
so the record is appended on the host side and read in the node through the mount.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from fake_gpus.catalog.xids import MAX_XID, NVML_HEADER_SOURCE, describe
from fake_gpus.nvml import health, state
from testbed.cli.arguments import add_cluster_lookup
from testbed.cli.gpu_drain import add_actions
from testbed.errors import BadInputError, EnvironmentProblem


def _xid(text: str) -> int:
    if not text.isdigit() or not 1 <= int(text) <= MAX_XID:
        raise argparse.ArgumentTypeError(f"{text[:20]!r}; valid: an Xid from 1 to {MAX_XID} ({NVML_HEADER_SOURCE})")
    return int(text)


def running_cluster(args: argparse.Namespace):
    """The cluster `--name`/`--backend` name, running; BadInputError naming what exists otherwise."""
    from testbed.clusters.registry import ClusterNotFound, cluster_named

    try:
        cluster = cluster_named(args.name, args.backend)
    except ClusterNotFound as exc:
        raise BadInputError(str(exc)) from None
    if not cluster.status().running:
        raise BadInputError(f"cluster {cluster.name!r} is not running; valid: a running cluster (`dra-testbed status --name {cluster.name}`)")
    return cluster


def _node_state_dir(args: argparse.Namespace) -> Path:
    """The running cluster's node state directory; BadInputError naming what exists otherwise."""
    cluster = running_cluster(args)
    if cluster.backend not in ("kwok", "kind"):
        raise EnvironmentProblem(f"gpu {args.action} reaches KWOK and kind nodes; {cluster.name!r} is a {cluster.backend} cluster")
    dirs = _kind_state_dirs(cluster) if cluster.backend == "kind" else _kwok_state_dirs(cluster.home)
    if args.node not in dirs:
        raise BadInputError(f"cluster {cluster.name!r} has no GPU node {args.node!r}; valid: {', '.join(sorted(dirs)) or 'none'}")
    return dirs[args.node]


def _kwok_state_dirs(home: Path) -> dict[str, Path]:
    """Node name -> state directory: the machine process keeps every KWOK node's under `nvml/`."""
    root = home / "nvml"
    return {p.name: p for p in root.iterdir() if (p / "gpus").is_file()} if root.is_dir() else {}


def _kind_state_dirs(cluster) -> dict[str, Path]:
    """Node name -> host side of the node's state mount, under its layout name and its kind node name (the
    worker's container, also its Kubernetes name): both identify it in `dra-testbed status`."""
    from testbed.clusters.kind.nodes import KindNode

    dirs: dict[str, Path] = {}
    for index, node in enumerate(cluster.saved_layout().nodes, start=1):  # workers are numbered in layout order
        folder = cluster.home / "nodes" / node.name / "nvml"
        if (folder / "gpus").is_file():
            dirs[node.name] = dirs[cluster.node_name(KindNode("worker", index, layout=node))] = folder
    return dirs


def _gpu_target(node_dir: Path, node: str, spec: str) -> tuple[int, str, int, int]:
    """GPU index, its UUID, and the MIG instance ids (or NO_INSTANCE) that GPU (an index, GPU- or MIG- UUID) names."""
    gpus, mig = state.validate_state_dir(node_dir)
    for g in gpus:
        if spec == str(g.index) or spec.lower() == g.uuid.lower():
            return g.index, g.uuid, health.NO_INSTANCE, health.NO_INSTANCE
    for ci in mig.compute_instances:
        if spec.lower() == ci.uuid.lower():
            return ci.gpu, ci.uuid, ci.gi, ci.id
    raise BadInputError(f"node {node} has no GPU {spec!r}; valid: an index 0 to {len(gpus) - 1}, a GPU UUID or a MIG device UUID "
                        f"(`dra-testbed fake-nvml` or nvidia-smi -L on the node lists them)")


def cmd_gpu(args: argparse.Namespace) -> int:
    node_dir = _node_state_dir(args)
    gpu, uuid, gi, ci = _gpu_target(node_dir, args.node, args.gpu)
    lost = health.health(node_dir).get(gpu, health.GpuHealth()).lost
    if args.action == "heal":
        rec = health.append(node_dir, gpu, "heal")
        print(f"healed GPU {gpu} of node {args.node} (event {rec.seq}){'' if lost else ' (it was not lost: its pending recovery and volatile ECC counts are cleared)'}")
        return 0
    if lost:
        raise BadInputError(f"GPU {gpu} of node {args.node} is lost: it reports nothing more; valid: `dra-testbed gpu heal` it first")
    if args.xid is not None:
        rec = health.append(node_dir, gpu, "xid", args.xid, gi, ci)
        what = describe(args.xid)
    elif args.ecc is not None:
        rec = health.append(node_dir, gpu, f"ecc-{args.ecc}")  # ECC counts per GPU, even named by a MIG device
        what = f"{args.ecc}-bit ECC error"
    else:
        rec = health.append(node_dir, gpu, "lost")
        what = "GPU lost (NVML_ERROR_GPU_IS_LOST from now on)"
    print(f"{what} on {uuid} (GPU {gpu}) of node {args.node}: event {rec.seq}")
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `gpu fail`, `gpu heal`, `gpu drain` and `gpu undrain` to the `dra-testbed` parser."""
    gpu = sub.add_parser("gpu", help="make a fake GPU fail (Xid, ECC, lost) or heal it; drain devices for maintenance")
    actions = gpu.add_subparsers(dest="action", required=True)
    fail = actions.add_parser("fail", help="inject a fault: NVML event sets registered on the GPU receive it")
    heal = actions.add_parser("heal", help="reset the GPU: end a lost state, clear the recovery action an Xid left pending and the volatile ECC counters")
    for p in (fail, heal):
        add_cluster_lookup(p)
        p.add_argument("node", help="node name")
        p.add_argument("gpu", help="GPU index, GPU UUID, or MIG device UUID (an Xid then names its GPU and compute instance)")
        p.set_defaults(func=cmd_gpu)
    what = fail.add_mutually_exclusive_group(required=True)
    what.add_argument("--xid", type=_xid, help=f"an Xid critical error event, 1 to {MAX_XID}")
    what.add_argument("--ecc", choices=("single", "double"), help="a single- or double-bit ECC error event, counted")
    what.add_argument("--lost", action="store_true", help="the GPU falls off the bus")
    add_actions(actions)
