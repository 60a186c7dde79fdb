"""`dra-testbed image ...`: build and list the node, driver and workload images of the kind backend."""

from __future__ import annotations

import argparse
import json
import sys

from hostenv.versions import DEFAULT_MINOR, RELEASES


def cmd_image_build(args: argparse.Namespace) -> int:
    from testbed.clusters.kind.images.node_image import ensure_node_image
    from testbed.clusters.kind.images.driver_image import ensure_driver_image, ensure_workload_image

    from testbed.host.docker.dockerd import stop_engine_started_here

    try:
        built = {"node": ensure_node_image(args.k8s, prefer_kindest=not args.offline, rebuild=args.rebuild).reference}
        if not args.node_only:
            built["workload"] = ensure_workload_image()
            built["driver"] = ensure_driver_image()
    finally:  # a dockerd the build had to start goes again (one that was running stays), also on failure or a signal
        stop_engine_started_here()
    print(json.dumps(built, indent=2))
    return 0


def cmd_engine_stop(args: argparse.Namespace) -> int:
    from testbed.host.docker.dockerd import stop_engine

    print("stopped the dockerd dra-testbed started" if stop_engine() else "no dockerd of ours is running", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `image build` and `image stop-engine` to the dra-testbed parser."""
    image = sub.add_parser("image", help="kind node, driver and workload images (built offline)")
    isub = image.add_subparsers(dest="image_command", required=True)
    build = isub.add_parser("build", help="build (or find) the images a kind cluster of a minor needs")
    build.add_argument("--k8s", choices=sorted(RELEASES), default=DEFAULT_MINOR)
    build.add_argument("--offline", action="store_true", help="build our node image even when kindest/node is present")
    build.add_argument("--rebuild", action="store_true", help="build again even when cached")
    build.add_argument("--node-only", action="store_true", help="only the node image")
    build.set_defaults(func=cmd_image_build)
    stop = isub.add_parser("stop-engine", help="stop the dockerd dra-testbed started (never someone else's)")
    stop.set_defaults(func=cmd_engine_stop)
