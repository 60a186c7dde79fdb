"""The `dra-testbed` command: toolchain, clusters up/down/status/kubeconfig, fake NVML."""

from __future__ import annotations

import argparse
import gc
import json
import re
import signal
import sys
from pathlib import Path

from hostenv.versions import DEFAULT_MINOR, RELEASES
from testbed.host import interrupts
from testbed.clusters.base import DEFAULT_NAME, ClusterSpec
from testbed.clusters.registry import BACKENDS

EXIT_USAGE = 2
# names become directories, kwokctl/kind cluster names and Docker container names
_CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


class UsageError(ValueError):
    """Bad input from the user: printed as one line, exit code 2, nothing started."""


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line (no usage dump), exit code 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_USAGE)


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"dra-testbed: error: {message}", file=sys.stderr)
    return code


def _minor(text: str) -> str:
    key = text.removeprefix("v")
    if key not in RELEASES:
        raise argparse.ArgumentTypeError(f"unknown Kubernetes minor {text!r}; valid: {', '.join(sorted(RELEASES))}")
    return key


def _cluster_name(text: str) -> str:
    if not _CLUSTER_NAME.match(text) or len(text) > 40:
        raise argparse.ArgumentTypeError(f"cluster name {text!r} is not valid; valid: lower-case letters, digits and '-', "
                                         "starting with a letter, at most 40 characters (e.g. lab-1)")
    return text


def _binary_override(text: str) -> tuple[str, str]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    name, path = text.split("=", 1)
    return name, path


def _cluster(backend: str, name: str):
    from testbed.clusters.registry import cluster_for

    return cluster_for(backend, name)


def cmd_up(args: argparse.Namespace) -> int:
    from testbed.clusters.layout import from_flags, load_layout

    if args.layout and args.node:
        raise UsageError("give either --layout FILE or --node flags, not both")
    layout = load_layout(args.layout) if args.layout else from_flags(args.node or [])
    from testbed.clusters.driver import parse_driver

    driver = parse_driver(args.driver, args.driver_name, args.driver_binary, args.driver_image)
    spec = ClusterSpec(name=args.name, k8s=args.k8s, layout=layout, apiserver_port=args.port, binaries=dict(args.binary or []),
                       allow_large=args.allow_large, driver=driver)
    kubeconfig = _cluster(args.backend, args.name).create(spec, force=args.force)
    print(kubeconfig)
    return 0


def cmd_down(args: argparse.Namespace) -> int:
    cluster = _cluster(args.backend, args.name)
    if not cluster.exists():
        print(f"no {args.backend} cluster named {args.name!r}; nothing to do", file=sys.stderr)
        return 0
    cluster.delete()
    print(f"deleted {args.backend} cluster {args.name!r}", file=sys.stderr)
    return 0


def cmd_status(args: argparse.Namespace) -> int:
    status = _cluster(args.backend, args.name).status()
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


def cmd_kubeconfig(args: argparse.Namespace) -> int:
    print(_cluster(args.backend, args.name).kubeconfig())
    return 0


def cmd_toolchain_ensure(args: argparse.Namespace) -> int:
    from testbed.toolchain.resolve import ensure

    toolchain = ensure(args.k8s, args.only or None, overrides=dict(args.binary or []),
                       allow_download=not args.no_download, mirror=args.mirror)
    for binary in toolchain.binaries.values():
        print(f"{binary.name}\t{binary.origin}\t{binary.path}")
    return 0


def cmd_toolchain_list(args: argparse.Namespace) -> int:
    from testbed.toolchain.projects import PROJECTS
    from testbed.toolchain.store import CachedRelease

    print("minor\tproject\tversion\tstate\torigin\tsize")
    for minor, release in sorted(RELEASES.items()):
        for project in PROJECTS.values():
            version = release.project_version(project.name)
            slot = CachedRelease.at(project.name, version)
            manifest = slot.manifest()
            state = "missing" if manifest is None else ("ok" if not slot.problems() else "damaged")
            origin = manifest["origin"] if manifest else "-"
            size = f"{slot.disk_usage() / 2**20:.0f}MiB" if manifest else "-"
            print(f"{minor}\t{project.name}\t{version}\t{state}\t{origin}\t{size}")
    return 0


def cmd_toolchain_mirror(args: argparse.Namespace) -> int:
    from testbed.toolchain.mirror import write_mirror
    from hostenv.versions import release_for

    try:
        files = write_mirror(release_for(args.k8s), Path(args.directory))
    except FileNotFoundError as exc:
        raise UsageError(str(exc)) from exc
    print(f"wrote {len(files)} files under {args.directory}; serve it over HTTP and pass its URL as --mirror", file=sys.stderr)
    return 0


def cmd_replay(args: argparse.Namespace) -> int:
    from testbed.workloads.replay import replay

    bundle = Path(args.bundle)
    try:
        found = bundle.is_dir()
    except OSError as exc:  # a name too long for the file system, and the like
        raise UsageError(f"no replay bundle at {str(bundle)[:80]}: {exc.strerror}; expected a directory with layout.yaml and steps.json") from exc
    if not found:
        raise UsageError(f"no replay bundle at {bundle}: expected a directory with layout.yaml and steps.json")
    try:
        return replay(bundle, k8s=args.k8s, keep=args.keep_cluster, kubeconfig=args.kubeconfig, backend=args.backend)
    except ValueError as exc:
        raise UsageError(str(exc)) from exc


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dra-testbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    def cluster_args(p: argparse.ArgumentParser) -> None:
        p.add_argument("--backend", choices=BACKENDS, default="kwok", help="cluster backend (default: kwok)")
        p.add_argument("--name", type=_cluster_name, default=DEFAULT_NAME, help=f"cluster name (default: {DEFAULT_NAME})")

    up = sub.add_parser("up", help="bring up a cluster with DRA and fake GPU nodes; prints the kubeconfig path last")
    cluster_args(up)
    up.add_argument("--k8s", type=_minor, default=DEFAULT_MINOR, help=f"Kubernetes minor (default {DEFAULT_MINOR})")
    up.add_argument("--layout", help="layout file (see clusters/layouts/)")
    up.add_argument("--node", action="append", metavar="NAME=BOARD:COUNT:MODE", help="a GPU node; repeatable")
    up.add_argument("--port", type=int, help="kube-apiserver port (default: a free one)")
    up.add_argument("--force", action="store_true", help="replace an existing cluster of that name")
    up.add_argument("--allow-large", action="store_true",
                    help="allow more nodes or GPUs than the backend's sane bound (kwok 256 nodes/1024 GPUs, kind 8/32)")
    up.add_argument("--binary", action="append", type=_binary_override, metavar="NAME=PATH", help="use this binary")
    up.add_argument("--driver", default="ours", metavar="ours|nvidia|binary:PATH|image:REF",
                    help="the DRA driver on the GPU nodes (default: ours, the fake-GPU driver; nvidia: NVIDIA's gpu-kubelet-plugin)")
    up.add_argument("--driver-binary", metavar="PATH", help="with --driver nvidia: the gpu-kubelet-plugin executable "
                    "(default: $DRA_TESTBED_NVIDIA_PLUGIN)")
    up.add_argument("--driver-image", metavar="IMAGE", help="with --driver nvidia on kind: run this image of NVIDIA's driver "
                    "(in the local Docker engine) instead of building one around the binary")
    up.add_argument("--driver-name", help="DRA driver name its ResourceSlices carry (default: gpu.nvidia.com)")
    up.set_defaults(func=cmd_up)

    down = sub.add_parser("down", help="tear a cluster down, leaving nothing behind")
    cluster_args(down)
    down.set_defaults(func=cmd_down)

    status = sub.add_parser("status", help="whether a cluster runs and what it holds (exit 1 when not running)")
    cluster_args(status)
    status.add_argument("--json", action="store_true")
    status.set_defaults(func=cmd_status)

    kubeconfig = sub.add_parser("kubeconfig", help="print the kubeconfig path of a cluster")
    cluster_args(kubeconfig)
    kubeconfig.set_defaults(func=cmd_kubeconfig)

    replay = sub.add_parser("replay", help="re-run a failing property bundle on a fresh cluster (exit 1 if it still fails)")
    replay.add_argument("bundle", help="bundle directory written by a failing property (see suites/properties)")
    replay.add_argument("--k8s", type=_minor, default=None, help="Kubernetes minor (default: the bundle's, else the default)")
    replay.add_argument("--backend", choices=BACKENDS, default=None, help="backend of the fresh cluster (default: the bundle's, else kwok)")
    replay.add_argument("--kubeconfig", help="replay on this existing cluster instead of a fresh one")
    replay.add_argument("--keep-cluster", action="store_true", help="leave the fresh cluster running afterwards")
    replay.set_defaults(func=cmd_replay)

    toolchain = sub.add_parser("toolchain", help="binaries per Kubernetes minor")
    tsub = toolchain.add_subparsers(dest="toolchain_command", required=True)
    ensure = tsub.add_parser("ensure", help="make every binary of a minor available (cache, download or build)")
    ensure.add_argument("--k8s", type=_minor, default=DEFAULT_MINOR)
    ensure.add_argument("--only", action="append", metavar="BINARY", help="just this binary; repeatable")
    ensure.add_argument("--binary", action="append", type=_binary_override, metavar="NAME=PATH")
    ensure.add_argument("--mirror", help="base URL of a mirror of the official release downloads")
    ensure.add_argument("--no-download", action="store_true", help="never download; build what is not cached")
    ensure.set_defaults(func=cmd_toolchain_ensure)
    mirror = tsub.add_parser("mirror", help="lay out cached binaries as the official download hosts do")
    mirror.add_argument("directory")
    mirror.add_argument("--k8s", type=_minor, default=DEFAULT_MINOR)
    mirror.set_defaults(func=cmd_toolchain_mirror)
    listing = tsub.add_parser("list", help="what is cached, per minor")
    listing.set_defaults(func=cmd_toolchain_list)

    from fake_gpus.nvml.cli import register as register_fake_nvml
    from testbed.cli.try_cmd import register as register_try
    from testbed.cli.image import register as register_images
    from testbed.cli.density import register as register_density
    from testbed.cli.conformance import register as register_conformance
    from testbed.cli.upstream import register as register_upstream

    register_fake_nvml(sub)
    register_images(sub)
    register_try(sub, _minor)
    register_density(sub)
    register_conformance(sub)
    register_upstream(sub, _minor, _cluster_name)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `dra-testbed`."""
    from fake_gpus.catalog import CatalogError
    from testbed.clusters.base import ClusterError
    from testbed.errors import BadInputError, UnknownNameError
    from testbed.clusters.layout import LayoutError
    from testbed.toolchain.resolve import ToolchainError
    from hostenv.versions import UnknownVersionError
    from testbed.host.docker.dockerd import DockerError
    from testbed.host.hostdeps import HostDepsMissing
    from testbed.clusters.kind.images.node_image import ImageBuildError
    from testbed.clusters.kind.images.rootfs import RootfsError

    args = build_parser().parse_args(argv)
    interrupts.install()  # SIGTERM and SIGHUP unwind through every cleanup, as Ctrl-C does
    try:
        return int(args.func(args) or 0)
    except (UsageError, LayoutError, CatalogError, UnknownVersionError, UnknownNameError, BadInputError) as exc:
        return _fail(str(exc))
    except (ClusterError, ToolchainError, HostDepsMissing, DockerError, ImageBuildError, RootfsError) as exc:
        return _fail(str(exc), 1)
    except KeyboardInterrupt:
        signum = interrupts.received()
        return _fail(f"interrupted{f' ({signal.Signals(signum).name})' if signum else ''}; cleaned up", interrupts.exit_code())


def run() -> None:
    """The `dra-testbed` executable: `main`, then an exit that does not walk the heap."""
    code = main()
    # Everything left is freed by the exit itself. Without the freeze, the interpreter's shutdown collects
    # the Kubernetes client's hundreds of thousands of objects first: 0.15 s idle, a second on a loaded
    # machine, after `up` has printed its kubeconfig. Finalizers, atexit hooks and flushes still run.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    run()
