"""`fake-nvml` subcommands: env (make a node's GPUs visible to NVML clients), reset, build."""

from __future__ import annotations

import argparse
import shlex
import sys
from pathlib import Path

EXIT_USAGE = 2


def _fail(message: str, code: int = EXIT_USAGE) -> int:
    print(f"fake-nvml: error: {message}", file=sys.stderr)
    return code


def cmd_env(args: argparse.Namespace) -> int:
    """Create or check the state dir, then print the exports that point NVML clients at it."""
    from fake_gpus.nvml import state
    from fake_gpus.nvml.build import BuildError, ensure_library

    try:
        boards = [state.parse_gpu_spec(spec) for spec in args.gpus]  # all checked before anything is created
        state_dir = Path(args.state_dir).expanduser().resolve()
        state.create_state_dir(state_dir, boards)
    except state.StateError as exc:
        return _fail(str(exc))
    except OSError as exc:  # a path too long, a parent that is a file, no permission
        return _fail(f"--state-dir {args.state_dir[:80]}: {exc.strerror}; valid: a directory path this user may create")
    try:
        lib_dir = ensure_library()
    except BuildError as exc:
        return _fail(str(exc).splitlines()[0], 1)
    print(f"export LD_LIBRARY_PATH={shlex.quote(str(lib_dir))}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}")
    print(f"export FAKE_NVML_STATE_DIR={shlex.quote(str(state_dir))}")
    return 0


def cmd_reset(args: argparse.Namespace) -> int:
    """Destroy every MIG instance of the node and turn MIG off."""
    from fake_gpus.nvml import state

    try:
        state.reset_state_dir(Path(args.state_dir).expanduser())
    except state.StateError as exc:
        return _fail(str(exc))
    print(f"reset {args.state_dir}: no MIG instances, MIG off", file=sys.stderr)
    return 0


def cmd_build(args: argparse.Namespace) -> int:
    """Build (or find in the cache) libnvidia-ml.so.1 and print its directory."""
    from fake_gpus.nvml.build import BuildError, ensure_library

    try:
        print(ensure_library())
    except BuildError as exc:
        return _fail(str(exc), 1)
    return 0


def register(sub: argparse._SubParsersAction) -> None:
    """Add the `fake-nvml` command and its subcommands; each sets `func` to a handler returning an exit code."""
    top = sub.add_parser("fake-nvml", help="the fake libnvidia-ml.so.1 and per-node GPU state",
                         description="Fake NVML: a libnvidia-ml.so.1 backed by the board catalog and a state directory per node.")
    commands = top.add_subparsers(dest="fake_nvml_command", required=True, metavar="{env,reset,build}")

    env = commands.add_parser("env", help="create a node's state dir and print the shell exports for NVML clients")
    env.add_argument("--gpus", action="append", required=True, metavar="BOARD:COUNT",
                     help="boards of the node, e.g. h100-80gb:8 (repeat for mixed nodes)")
    env.add_argument("--state-dir", required=True, metavar="DIR", help="the node's state directory (created if missing)")
    env.set_defaults(func=cmd_env)

    reset = commands.add_parser("reset", help="destroy all MIG instances of a node and turn MIG off")
    reset.add_argument("--state-dir", required=True, metavar="DIR")
    reset.set_defaults(func=cmd_reset)

    build = commands.add_parser("build", help="build libnvidia-ml.so.1 (cached) and print its directory")
    build.set_defaults(func=cmd_build)
