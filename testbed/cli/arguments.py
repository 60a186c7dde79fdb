"""Argument types and options that several `dra-testbed` subcommands share: a Kubernetes minor, a cluster name,
NAME=PATH binary overrides, and the options that name a cluster (--name) and pick or narrow its backend."""

from __future__ import annotations

import argparse
import re

from hostenv.versions import RELEASES
from testbed.clusters.base import DEFAULT_NAME
from testbed.clusters.registry import BACKENDS

# names become directories, kwokctl/kind cluster names and Docker container names
_CLUSTER_NAME = re.compile(r"^[a-z]([-a-z0-9]*[a-z0-9])?$")


def minor(text: str) -> str:
    """A supported Kubernetes minor, with or without a leading v (`1.34`, `v1.34`)."""
    key = text.removeprefix("v")
    if key not in RELEASES:
        raise argparse.ArgumentTypeError(f"unknown Kubernetes minor {text!r}; valid: {', '.join(sorted(RELEASES))}")
    return key


def cluster_name(text: str) -> str:
    """A name every backend can use for a cluster's folders, processes and containers."""
    if not _CLUSTER_NAME.match(text) or len(text) > 40:
        raise argparse.ArgumentTypeError(f"cluster name {text!r} is not valid; valid: lower-case letters, digits and '-', "
                                         "starting with a letter, at most 40 characters (e.g. lab-1)")
    return text


def binary_override(text: str) -> tuple[str, str]:
    """NAME=PATH: use the binary at PATH instead of the toolchain's NAME."""
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected NAME=PATH, got {text!r}")
    name, path = text.split("=", 1)
    return name, path


def add_cluster_name(parser: argparse.ArgumentParser) -> None:
    """--name of the cluster a command brings up or acts on."""
    parser.add_argument("--name", type=cluster_name, default=DEFAULT_NAME, help=f"cluster name (default: {DEFAULT_NAME})")


def add_new_cluster(parser: argparse.ArgumentParser) -> None:
    """--backend and --name of a cluster to bring up."""
    parser.add_argument("--backend", choices=BACKENDS, default="kwok", help="cluster backend (default: kwok)")
    add_cluster_name(parser)


def add_cluster_lookup(parser: argparse.ArgumentParser) -> None:
    """--backend and --name of a running cluster: it is found by name in every backend, --backend only narrows."""
    parser.add_argument("--backend", choices=BACKENDS, default=None,
                        help="look only among this backend's clusters (default: every backend; needed when two hold the name)")
    add_cluster_name(parser)
