"""`dra-testbed toolchain ...`: the Kubernetes binaries per minor: ensure them, list the cache, mirror it."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from hostenv.versions import DEFAULT_MINOR, RELEASES
from testbed.cli.arguments import binary_override, minor
from testbed.errors import BadInputError


def cmd_toolchain_ensure(args: argparse.Namespace) -> int:
    from testbed.toolchain.resolve import ensure

    toolchain = ensure(args.k8s, args.only or None, overrides=dict(args.binary or []),
                       allow_download=not args.no_download, mirror=args.mirror)
    for binary in toolchain.binaries.values():
        print(f"{binary.name}\t{binary.origin}\t{binary.path}")
    return 0


def cmd_toolchain_list(args: argparse.Namespace) -> int:
    from hostenv.versions import release_for
    from testbed.toolchain.projects import PROJECTS
    from testbed.toolchain.renderers import RENDERER_PROJECTS

    print("minor\tproject\tversion\tstate\torigin\tsize")
    for key, release in sorted(RELEASES.items()):
        for project in PROJECTS.values():
            version = release.project_version(project.name)
            print(_cache_row(release.label, project.name, version))
            for part in _part_slots(project.name, version):  # what was made of a release that could not be whole
                print(_cache_row(release.label, project.name, part))
    # the renderers of `try -k` / `--helm`: one version for every minor, built on first use
    for name in RENDERER_PROJECTS:
        print(_cache_row("any", name, release_for(DEFAULT_MINOR).project_version(name)))
    return 0


def _part_slots(project: str, version: str) -> list[str]:
    """Slots holding a part of `project` `version` (named `VERSION+BINARY,...`: testbed.toolchain.resolve)."""
    from testbed.toolchain.store import CachedRelease

    folder = CachedRelease.at(project, version).root.parent
    return sorted(p.name for p in folder.glob(f"{version}+*") if p.is_dir()) if folder.is_dir() else []


def _cache_row(minor_key: str, project: str, version: str) -> str:
    """One line of `toolchain list`: what the cache slot of `project` `version` holds."""
    from testbed.toolchain.store import CachedRelease

    slot = CachedRelease.at(project, version)
    manifest = slot.manifest()
    state = "missing" if manifest is None else ("ok" if not slot.problems() else "damaged")
    origin = manifest["origin"] if manifest else "-"
    size = f"{slot.disk_usage() / 2**20:.0f}MiB" if manifest else "-"
    return f"{minor_key}\t{project}\t{version}\t{state}\t{origin}\t{size}"


def cmd_toolchain_mirror(args: argparse.Namespace) -> int:
    from hostenv.versions import release_for
    from testbed.toolchain.mirror import write_mirror

    try:
        files = write_mirror(release_for(args.k8s), Path(args.directory))
    except FileNotFoundError as exc:
        raise BadInputError(str(exc)) from exc
    print(f"wrote {len(files)} files under {args.directory}; serve it over HTTP and pass its URL as --mirror", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `toolchain ensure`, `toolchain mirror` and `toolchain list` to the `dra-testbed` parser."""
    toolchain = sub.add_parser("toolchain", help="binaries per Kubernetes minor")
    tsub = toolchain.add_subparsers(dest="toolchain_command", required=True)
    ensure = tsub.add_parser("ensure", help="make every binary of a minor available (cache, download or build)")
    ensure.add_argument("--k8s", type=minor, default=DEFAULT_MINOR)
    ensure.add_argument("--only", action="append", metavar="BINARY", help="just this binary; repeatable")
    ensure.add_argument("--binary", action="append", type=binary_override, metavar="NAME=PATH")
    ensure.add_argument("--mirror", help="base URL of a mirror of the official release downloads")
    ensure.add_argument("--no-download", action="store_true", help="never download; build what is not cached")
    ensure.set_defaults(func=cmd_toolchain_ensure)
    mirror = tsub.add_parser("mirror", help="lay out cached binaries as the official download hosts do")
    mirror.add_argument("directory")
    mirror.add_argument("--k8s", type=minor, default=DEFAULT_MINOR)
    mirror.set_defaults(func=cmd_toolchain_mirror)
    listing = tsub.add_parser("list", help="what is cached, per minor")
    listing.set_defaults(func=cmd_toolchain_list)
