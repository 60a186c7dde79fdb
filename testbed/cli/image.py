"""`dra-testbed image ...`: build and list the node, driver and workload images of the kind backend; load a local
image into a kind cluster's nodes (as `kind load docker-image`, optionally under another name)."""

from __future__ import annotations

import argparse
import json
import re
import sys

from hostenv.versions import DEFAULT_MINOR, RELEASES
from testbed.cli.arguments import add_cluster_lookup


def cmd_image_build(args: argparse.Namespace) -> int:
    from testbed.clusters.kind.images.node_image import ensure_node_image
    from testbed.clusters.kind.images.driver_image import ensure_driver_image, ensure_workload_image
    from testbed.clusters.kind.images.fleet_images import ensure_kwok_image

    from testbed.host.docker.dockerd import stop_engine_started_here

    try:
        built = {"node": ensure_node_image(args.k8s, prefer_kindest=not args.offline, rebuild=args.rebuild).reference}
        if not args.node_only:
            built["workload"] = ensure_workload_image()
            built["driver"] = ensure_driver_image()
            built["kwok"] = ensure_kwok_image(args.k8s)  # the Helm chart's KWOK controller, for clusters that pull nothing
    finally:  # a dockerd the build had to start goes again (one that was running stays), also on failure or a signal
        stop_engine_started_here()
    print(json.dumps(built, indent=2))
    return 0


def cmd_engine_stop(args: argparse.Namespace) -> int:
    from testbed.host.docker.dockerd import stop_engine

    print("stopped the dockerd dra-testbed started" if stop_engine() else "no dockerd of ours is running", file=sys.stderr)
    return 0


# NAME[:TAG] as Docker names images: lower-case path components, an optional registry host[:port], a tag
_REFERENCE = re.compile(r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*"
                        r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?$")


def image_reference(text: str) -> str:
    """argparse type of an image reference NAME[:TAG]; one line naming the form otherwise."""
    if not _REFERENCE.match(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not an image reference: give NAME[:TAG], e.g. ubuntu:22.04 or dra-testbed/workload:abc")
    return text


def cmd_image_load(args: argparse.Namespace) -> int:
    from testbed.clusters.base import ImageLoading, ability
    from testbed.clusters.kind.image_alias import load_as
    from testbed.clusters.registry import ClusterNotFound, cluster_named
    from testbed.errors import BadInputError
    from testbed.host.docker.dockerd import ensure_engine, image_present

    try:
        cluster = cluster_named(args.name, args.backend)
    except ClusterNotFound as exc:
        raise BadInputError(str(exc)) from None
    if ability(cluster, ImageLoading) is None:
        raise BadInputError(f"cluster {args.name!r} is a {cluster.backend} cluster, whose nodes run no containers; valid: a kind cluster")
    ensure_engine()
    if not image_present(args.image):
        raise BadInputError(f"image {args.image!r} is not in the local Docker engine: build or pull it first (`docker images` lists those there)")
    nodes = load_as(cluster, args.image, args.alias, workers_only=args.workers_only)
    print(f"loaded {args.image}{f' as {args.alias}' if args.alias else ''} into {len(nodes)} node(s) of {cluster.name}", file=sys.stderr)
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
    load = isub.add_parser("load", help="load a local Docker image into a kind cluster's nodes (as `kind load docker-image`)")
    load.add_argument("image", type=image_reference, metavar="IMAGE[:TAG]", help="an image in the local Docker engine")
    load.add_argument("--as", dest="alias", type=image_reference, metavar="NAME:TAG",
                      help="also name it so inside the nodes (pods asking for NAME:TAG get it); the local engine is left as it is")
    load.add_argument("--workers-only", action="store_true", help="leave out the control plane")
    add_cluster_lookup(load)
    load.set_defaults(func=cmd_image_load)
    stop = isub.add_parser("stop-engine", help="stop the dockerd dra-testbed started (never someone else's)")
    stop.set_defaults(func=cmd_engine_stop)
