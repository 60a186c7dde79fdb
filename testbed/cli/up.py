"""`dra-testbed up`: bring up a cluster with DRA and fake GPU nodes; the kubeconfig path is printed last."""

from __future__ import annotations

import argparse

from hostenv.versions import DEFAULT_MINOR
from testbed.cli.arguments import add_new_cluster, binary_override, minor
from testbed.cli.driver_option import add_driver_options, driver_from_args
from testbed.errors import BadInputError


def cmd_up(args: argparse.Namespace) -> int:
    from testbed.clusters.base import ClusterSpec
    from testbed.clusters.layout import from_flags, load_layout
    from testbed.clusters.registry import cluster_for, find_clusters

    if args.layout and args.node:
        raise BadInputError("give either --layout FILE or --node flags, not both")
    layout = load_layout(args.layout) if args.layout else from_flags(args.node or [])
    driver = driver_from_args(args)
    spec = ClusterSpec(name=args.name, k8s=args.k8s, layout=layout, apiserver_port=args.port, binaries=dict(args.binary or []),
                       allow_large=args.allow_large, driver=driver)
    # one name, one cluster: down, status and kubeconfig find a cluster by its name whatever its backend
    elsewhere = [c.backend for c in find_clusters(args.name) if c.backend != args.backend]
    if elsewhere:
        raise BadInputError(f"a {elsewhere[0]} cluster named {args.name!r} exists; give another --name, or take it down first "
                            f"(`dra-testbed down --name {args.name}`)")
    print(cluster_for(args.backend, args.name).create(spec, force=args.force))
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `up` to the `dra-testbed` parser."""
    up = sub.add_parser("up", help="bring up a cluster with DRA and fake GPU nodes; prints the kubeconfig path last")
    add_new_cluster(up)
    up.add_argument("--k8s", type=minor, default=DEFAULT_MINOR, help=f"Kubernetes minor (default {DEFAULT_MINOR})")
    up.add_argument("--layout", help="layout file (see clusters/layouts/)")
    up.add_argument("--node", action="append", metavar="NAME=BOARD:COUNT:MODE", help="a GPU node; repeatable")
    up.add_argument("--port", type=int, help="kube-apiserver port (default: a free one)")
    up.add_argument("--force", action="store_true", help="replace an existing cluster of that name")
    up.add_argument("--allow-large", action="store_true",
                    help="allow more nodes or GPUs than the backend's sane bound (kwok 256 nodes/1024 GPUs, kind 8/32)")
    up.add_argument("--binary", action="append", type=binary_override, metavar="NAME=PATH", help="use this binary")
    add_driver_options(up)
    up.set_defaults(func=cmd_up)
