"""`dra-testbed fake-nvml ...`: the fake NVML's commands. fake_gpus builds their parser (fake_gpus never imports
testbed); this module only hangs it under `dra-testbed`."""

from __future__ import annotations

import argparse

from fake_gpus.nvml import cli


def register(sub: argparse._SubParsersAction) -> None:
    """Add `fake-nvml env|reset|build` to the `dra-testbed` parser."""
    cli.register(sub)
