"""`dra-testbed replay`: re-run a failing property bundle on a fresh cluster (exit 1 if it still fails)."""

from __future__ import annotations

import argparse
from pathlib import Path

from testbed.cli.arguments import minor
from testbed.clusters.registry import BACKENDS
from testbed.errors import BadInputError


def cmd_replay(args: argparse.Namespace) -> int:
    from testbed.workloads.replay import replay

    bundle = Path(args.bundle)
    try:
        found = bundle.is_dir()
    except OSError as exc:  # a name too long for the file system, and the like
        raise BadInputError(f"no replay bundle at {str(bundle)[:80]}: {exc.strerror}; expected a directory with layout.yaml and steps.json") from exc
    if not found:
        raise BadInputError(f"no replay bundle at {bundle}: expected a directory with layout.yaml and steps.json")
    try:
        return replay(bundle, k8s=args.k8s, keep=args.keep_cluster, kubeconfig=args.kubeconfig, backend=args.backend)
    except ValueError as exc:
        raise BadInputError(str(exc)) from exc


def register(sub: argparse._SubParsersAction) -> None:
    """Add `replay` to the `dra-testbed` parser."""
    replay = sub.add_parser("replay", help="re-run a failing property bundle on a fresh cluster (exit 1 if it still fails)")
    replay.add_argument("bundle", help="bundle directory written by a failing property (see suites/properties)")
    replay.add_argument("--k8s", type=minor, default=None, help="Kubernetes minor (default: the bundle's, else the default)")
    replay.add_argument("--backend", choices=BACKENDS, default=None, help="backend of the fresh cluster (default: the bundle's, else kwok)")
    replay.add_argument("--kubeconfig", help="replay on this existing cluster instead of a fresh one")
    replay.add_argument("--keep-cluster", action="store_true", help="leave the fresh cluster running afterwards")
    replay.set_defaults(func=cmd_replay)
