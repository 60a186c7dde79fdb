"""SIGTERM and SIGHUP end a run the way Ctrl-C does: an exception that unwinds through every cleanup.

Python's default for SIGTERM and SIGHUP is to die on the spot, which skips every `finally` and leaves a
half-made cluster running. With `install()`, the first SIGINT, SIGTERM or SIGHUP raises (KeyboardInterrupt
or its subclass Terminated) in the main thread; signals that arrive while that exception unwinds are
noted and ignored, so a second Ctrl-C or a runner's repeated SIGTERM cannot cut the cleanup short
(SIGKILL still can).
"""

from __future__ import annotations

import signal
import sys
import threading

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


class Terminated(KeyboardInterrupt):
    """The run was asked to stop by SIGTERM or SIGHUP; unwinds like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


_raised: list[int] = []


def _handler(signum: int, frame) -> None:  # noqa: ARG001 - signal handler signature
    if _raised:
        print(f"dra-testbed: {signal.Signals(signum).name} received while cleaning up; finishing the cleanup first",
              file=sys.stderr, flush=True)
        return
    _raised.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def install() -> bool:
    """Route SIGINT, SIGTERM and SIGHUP through the cleanup-friendly handler; False off the main thread
    (where Python allows no handlers) or when SIGHUP/SIGTERM are ignored on purpose (nohup)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in HANDLED:
        if signum != signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # nohup and friends asked for this signal to be ignored: keep it so
        signal.signal(signum, _handler)
    return True


def received() -> int | None:
    """The signal that started the unwinding, if one did."""
    return _raised[0] if _raised else None


def exit_code(default: int = 130) -> int:
    """Shell convention: 128 + the signal's number (130 for Ctrl-C)."""
    return 128 + _raised[0] if _raised else default
