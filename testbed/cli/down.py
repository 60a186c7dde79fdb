"""`dra-testbed down`: tear a cluster down, leaving nothing behind; found by name whatever its backend."""

from __future__ import annotations

import argparse
import sys

from testbed.cli.arguments import add_cluster_lookup


def cmd_down(args: argparse.Namespace) -> int:
    from testbed.clusters.registry import ClusterNotFound, cluster_named

    try:
        cluster = cluster_named(args.name, args.backend)
    except ClusterNotFound as exc:  # already down: nothing to do, as a second `down` finds
        print(f"{exc.missing}, nothing to do; {exc.existing}", file=sys.stderr)
        return 0
    cluster.delete()
    print(f"deleted {cluster.backend} cluster {cluster.name!r}", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `down` to the `dra-testbed` parser."""
    down = sub.add_parser("down", help="tear a cluster down, leaving nothing behind")
    add_cluster_lookup(down)
    down.set_defaults(func=cmd_down)
