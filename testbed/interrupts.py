"""SIGTERM and SIGHUP end a run the way Ctrl-C does: an exception that unwinds through every cleanup.

Python's default for SIGTERM and SIGHUP is to die on the spot, which skips every `finally` and leaves a
half-made cluster running. With `install()`, the first SIGINT, SIGTERM or SIGHUP raises (KeyboardInterrupt
or its subclass Terminated) in the main thread; signals that arrive while that exception unwinds are
noted and ignored, so a second Ctrl-C or a runner's repeated SIGTERM cannot cut the cleanup short
(SIGKILL still can).

A raise that lands while a finalizer runs (a `__del__`, a weakref callback such as urllib3's pool
finalizer, a generator being collected) is swallowed by CPython ("Exception ignored in ..."): the run
would go on as if never asked to stop, and ignore every later signal. sys.unraisablehook sees such a
lost interruption; it is then raised again, once the main thread is out of the finalizer.
"""

from __future__ import annotations

import functools
import signal
import sys
import threading
import time

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
REDELIVERY_DELAY = 0.05  # seconds: long enough for the main thread to leave the finalizer that swallowed it


class Terminated(KeyboardInterrupt):
    """The run was asked to stop by SIGTERM or SIGHUP; unwinds like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


_raised: list[int] = []
_current: list[int] = []  # id() of the exception the handler raised last, to know it when a finalizer swallows it
_lost: list[int] = []  # the signal whose exception a finalizer swallowed: raised again


def _handler(signum: int, frame) -> None:
    ignored = bool(_raised) and not _lost
    if not ignored and _in_unraisable_hook(frame):
        _redeliver(signum)  # an exception raised in the hook itself is swallowed without reaching it
        return
    if ignored:
        print(f"dra-testbed: {signal.Signals(signum).name} received while cleaning up; finishing the cleanup first",
              file=sys.stderr, flush=True)
        return
    if _lost:
        signum = _lost.pop()
    else:
        _raised.append(signum)
    exc = KeyboardInterrupt() if signum == signal.SIGINT else Terminated(signum)
    _current[:] = [id(exc)]
    raise exc


def _in_unraisable_hook(frame) -> bool:
    while frame is not None:
        if frame.f_code is _unraisable.__code__:
            return True
        frame = frame.f_back
    return False


def _redeliver(signum: int) -> None:
    """Signal the main thread again, shortly, from another thread: by then it has left the finalizer."""
    main = threading.main_thread().ident

    def send() -> None:
        time.sleep(REDELIVERY_DELAY)
        signal.pthread_kill(main, signum)

    threading.Thread(target=send, name="interrupt-redelivery", daemon=True).start()


def _unraisable(unraisable, previous=sys.__unraisablehook__) -> None:
    """sys.unraisablehook: report as `previous` does (pytest makes a warning of it); an interruption of ours
    among them was lost, so it is raised again."""
    try:
        previous(unraisable)
    finally:
        exc = unraisable.exc_value
        if isinstance(exc, KeyboardInterrupt) and _current == [id(exc)] and not _lost:
            _current.clear()
            _lost.append(_raised[0])
            _redeliver(_lost[0])


def _hook_unraisable() -> None:
    """Put `_unraisable` in front of the current sys.unraisablehook, once (pytest installs its own at configure)."""
    if getattr(sys.unraisablehook, "func", None) is not _unraisable:
        sys.unraisablehook = functools.partial(_unraisable, previous=sys.unraisablehook)


def install() -> bool:
    """Route SIGINT, SIGTERM and SIGHUP through the cleanup-friendly handler; False off the main thread
    (where Python allows no handlers) or when SIGHUP/SIGTERM are ignored on purpose (nohup)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    for signum in HANDLED:
        if signum != signal.SIGINT and signal.getsignal(signum) == signal.SIG_IGN:
            continue  # nohup and friends asked for this signal to be ignored: keep it so
        signal.signal(signum, _handler)
    _hook_unraisable()
    return True


def received() -> int | None:
    """The signal that started the unwinding, if one did."""
    return _raised[0] if _raised else None


def exit_code(default: int = 130) -> int:
    """Shell convention: 128 + the signal's number (130 for Ctrl-C)."""
    return 128 + _raised[0] if _raised else default
