"""Running a command and signalling it once it reaches a phase: shared by the interrupt tests."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Phase:
    """A point of a run, reached when `reached(state, stderr)` says so."""

    def __init__(self, name: str, reached) -> None:
        self.name, self.reached = name, reached

    def __repr__(self) -> str:
        return self.name


def _stop(proc: subprocess.Popen) -> None:
    """End a run that went wrong: SIGTERM as a runner would, so it may still clean up; then SIGABRT, on which
    faulthandler ($PYTHONFAULTHANDLER, set for every run) writes where each thread of it is stuck; SIGKILL last."""
    for signum, wait in ((signal.SIGTERM, 120), (signal.SIGABRT, 30)):
        proc.send_signal(signum)
        try:
            proc.wait(timeout=wait)
            return
        except subprocess.TimeoutExpired:
            continue
    proc.kill()
    proc.wait()


def default_signals() -> None:
    """The run starts as from a terminal: a runner that ignores SIGHUP (nohup, some CI agents) must not
    hand that to the run, where the CLI rightly keeps an ignored signal ignored and the test would wait."""
    for signum in SIGNALS:
        signal.signal(signum, signal.SIG_DFL)


def interrupt_at(args: list[str], state: Path, phase: Phase, signum: int, timeout: float = 600,
                 ports_of=lambda state: (), env: dict[str, str] | None = None,
                 cwd: Path = REPO) -> tuple[int, str, tuple[int, ...]]:
    """Run `args` with its own state dir (and `env` added); send `signum` once `phase` is reached; return
    (exit code, stderr, the ports `ports_of(state)` found while it ran)."""
    env = dict(os.environ, DRA_TESTBED_STATE=str(state), PYTHONPATH=str(cwd), PYTHONFAULTHANDLER="1", **(env or {}))
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env, cwd=cwd,
                            preexec_fn=default_signals)
    err: list[str] = []
    out: list[str] = []  # read too: a run blocked writing to a full pipe would look like a hang of its own
    readers = [threading.Thread(target=into.extend, args=(stream,), daemon=True) for into, stream in ((err, proc.stderr), (out, proc.stdout))]
    for reader in readers:
        reader.start()
    ports: tuple[int, ...] = ()
    deadline = time.monotonic() + timeout
    while not phase.reached(state, "".join(err)):
        ports = ports or ports_of(state)
        if proc.poll() is not None:
            pytest.fail(f"the run ended ({proc.returncode}) before phase {phase}: {''.join(err)[-400:]}")
        if time.monotonic() > deadline:
            _stop(proc)
            pytest.fail(f"phase {phase} not reached in {timeout:.0f}s{_last_words(readers, err, out)}")
        time.sleep(0.02)
    proc.send_signal(signum)
    try:
        code = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        _stop(proc)
        pytest.fail(f"the run did not end within {timeout:.0f}s of {signal.Signals(signum).name}{_last_words(readers, err, out)}")
    for reader in readers:
        reader.join(10)
    return code, "".join(err), ports or ports_of(state)


def _last_words(readers: list[threading.Thread], err: list[str], out: list[str]) -> str:
    """The end of a stopped run's output: where it was, and the stacks faulthandler wrote on SIGABRT."""
    for reader in readers:
        reader.join(10)
    return f"; its stdout ended with:\n{''.join(out)[-1500:]}\nits stderr with:\n{''.join(err)[-4000:]}"
