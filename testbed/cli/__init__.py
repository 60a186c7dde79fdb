"""The `dra-testbed` command: one module per subcommand, the parser and the entry point in main."""

# `main` stays the module testbed.cli.main (the entry function is testbed.cli.main.main)
from testbed.cli.main import build_parser, run

__all__ = ["build_parser", "run"]
