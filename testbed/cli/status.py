"""`dra-testbed status`: whether a cluster runs and what it holds; found by name whatever its backend."""

from __future__ import annotations

import argparse
import json

from testbed.cli.arguments import add_cluster_lookup


def cmd_status(args: argparse.Namespace) -> int:
    from testbed.clusters.registry import cluster_named

    status = cluster_named(args.name, args.backend).status()  # ClusterNotFound: one line, exit 1
    if args.json:
        print(json.dumps(status.as_dict(), indent=2))
    else:
        state = "running" if status.running else "not running"
        print(f"{status.backend} cluster {status.name}: {state}")
        if status.running:
            print(f"  Kubernetes {status.server_version}, {status.nodes} nodes, {status.resource_slices} ResourceSlices")
        if status.kubeconfig:
            print(f"  kubeconfig: {status.kubeconfig}")
        if status.detail:
            print(f"  {status.detail}")
    return 0 if status.running else 1


def register(sub: argparse._SubParsersAction) -> None:
    """Add `status` to the `dra-testbed` parser."""
    status = sub.add_parser("status", help="whether a cluster runs and what it holds (exit 1 when not running)")
    add_cluster_lookup(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)
