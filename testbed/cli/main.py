"""The `dra-testbed` command: toolchain, clusters up/down/status/kubeconfig, fake NVML."""

from __future__ import annotations

import argparse
import gc
import signal
import sys

from testbed.cli import (conformance, density, down, fake_nvml, image, kubeconfig, replay, status, toolchain, try_cmd, up,
                         upstream)
from testbed.cli import gpu_health
from testbed.cli import ai_conformance
from testbed.cli import install
from testbed.errors import BadInputError, EnvironmentProblem
from testbed.host import interrupts

EXIT_ENVIRONMENT = 1
EXIT_BAD_INPUT = 2
# every subcommand, in the order `--help` and docs/reference/cli.md list them
COMMANDS = (up, down, status, kubeconfig, replay, toolchain, fake_nvml, image, try_cmd, density, conformance, upstream,
            gpu_health, ai_conformance, install)


class _Parser(argparse.ArgumentParser):
    """argparse that reports bad input as one line (no usage dump), exit code 2; subcommands' parsers are of this class too."""

    def error(self, message: str) -> None:  # type: ignore[override]
        print(f"{self.prog}: error: {message}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)


def _fail(message: str, code: int) -> int:
    print(f"dra-testbed: error: {message}", file=sys.stderr)
    return code


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="dra-testbed", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)
    for command in COMMANDS:
        command.register(sub)
    return parser


def main(argv: list[str] | None = None) -> int:
    """Entry point of `dra-testbed`: bad input is one line and exit code 2, an environment problem one line and exit code 1."""
    args = build_parser().parse_args(argv)
    interrupts.install()  # SIGTERM and SIGHUP unwind through every cleanup, as Ctrl-C does
    try:
        return int(args.func(args) or 0)
    except BadInputError as exc:
        return _fail(str(exc) or type(exc).__name__, EXIT_BAD_INPUT)
    except EnvironmentProblem as exc:
        return _fail(str(exc) or type(exc).__name__, EXIT_ENVIRONMENT)
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
