"""`dra-testbed kubeconfig`: the kubeconfig path of a cluster, found by name whatever its backend."""

from __future__ import annotations

import argparse

from testbed.cli.arguments import add_cluster_lookup


def cmd_kubeconfig(args: argparse.Namespace) -> int:
    from testbed.clusters.registry import cluster_named

    print(cluster_named(args.name, args.backend).kubeconfig())
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `kubeconfig` to the `dra-testbed` parser."""
    kubeconfig = sub.add_parser("kubeconfig", help="print the kubeconfig path of a cluster")
    add_cluster_lookup(kubeconfig)
    kubeconfig.set_defaults(func=cmd_kubeconfig)
