"""The `--driver` options of every command that brings up or runs a driver (testbed.clusters.driver has the
vocabulary, shared with the pytest plugin)."""

from __future__ import annotations

import argparse

import testbed.drivers  # noqa: F401 - every driver under test, registered before the help lists them
from testbed.clusters.driver import OURS, DriverSpec, driver_options, spec_from_options


def add_driver_options(parser: argparse.ArgumentParser, default: str | None = OURS, what: str = "the DRA driver on the GPU nodes") -> None:
    """Add the driver options to `parser`, in a group of their own."""
    group = parser.add_argument_group("driver under test")
    for flag, keywords in driver_options(default, what):
        group.add_argument(flag, **keywords)


def driver_from_args(args: argparse.Namespace) -> DriverSpec | None:
    """The DriverSpec the options name; DriverSpecError (one line, exit 2) when they do not fit together."""
    return spec_from_options(args)
