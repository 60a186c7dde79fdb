"""`dra-testbed install` / `uninstall`: the fake fleet of a layout in a cluster someone else runs (the Helm
chart charts/dra-fake-gpus, installed with our helm)."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from testbed.errors import BadInputError


def _kubeconfig(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_file():
        raise BadInputError(f"--kubeconfig {text}: no such file; valid: the kubeconfig of the cluster to install into")
    return path


def cmd_install(args: argparse.Namespace) -> int:
    from testbed.clusters.layout import check_layout, load_layout
    from testbed.install.release import install

    layout = load_layout(args.layout)
    check_layout(layout)
    started = time.monotonic()
    classes = install(_kubeconfig(args.kubeconfig), layout, args.release, args.namespace, args.image, not args.no_device_classes,
                      args.kwok_image)
    print(f"installed release {args.release!r} ({len(layout.nodes)} fake nodes) into namespace {args.namespace} "
          f"in {time.monotonic() - started:.1f} s; DeviceClasses {'made' if classes else 'left to the cluster'}", file=sys.stderr)
    return 0


def cmd_uninstall(args: argparse.Namespace) -> int:
    from testbed.install.release import uninstall

    uninstall(_kubeconfig(args.kubeconfig), args.release, args.namespace)
    print(f"uninstalled release {args.release!r}: every object it made is gone", file=sys.stderr)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add `install` and `uninstall` to the `dra-testbed` parser."""
    from testbed.install.values import DEFAULT_NAMESPACE, DEFAULT_RELEASE

    install = sub.add_parser("install", help="add a layout's fake GPU nodes to an existing cluster (Helm chart)")
    uninstall = sub.add_parser("uninstall", help="remove what `install` added, and nothing else")
    for parser in (install, uninstall):
        parser.add_argument("--kubeconfig", required=True, help="kubeconfig of the cluster")
        parser.add_argument("--release", default=DEFAULT_RELEASE, help=f"Helm release name (default {DEFAULT_RELEASE})")
        parser.add_argument("--namespace", default=DEFAULT_NAMESPACE, help=f"namespace of the release (default {DEFAULT_NAMESPACE})")
    install.add_argument("--layout", required=True, help="layout file (see clusters/layouts/)")
    install.add_argument("--image", help="the driver image REPOSITORY:TAG the cluster pulls (default: the chart's)")
    install.add_argument("--kwok-image", help="the KWOK controller image REPOSITORY:TAG the cluster pulls (default: the chart's)")
    install.add_argument("--no-device-classes", action="store_true", help="leave the DeviceClasses to the cluster's NVIDIA driver")
    install.set_defaults(func=cmd_install)
    uninstall.set_defaults(func=cmd_uninstall)
