"""SIGTERM and SIGHUP end a run the way Ctrl-C does: an exception that unwinds through every cleanup.

Python's default for SIGTERM and SIGHUP is to die on the spot, which skips every `finally` and leaves a
half-made cluster running. With `install()`, the first SIGINT, SIGTERM or SIGHUP raises (KeyboardInterrupt
or its subclass Terminated) in the main thread; signals that arrive while that exception unwinds are
noted and ignored, so a second Ctrl-C or a runner's repeated SIGTERM cannot cut the cleanup short
(SIGKILL still can).

Some places must not be interrupted by an exception, and there the signal is put off instead: sent to
the main thread again a moment later, until it lands elsewhere. In a finalizer (`__del__`, a weakref
callback such as urllib3's pool finalizer) or in sys.unraisablehook, CPython swallows the exception
("Exception ignored in ...") and the run would go on as if never asked to stop. In importlib's own code,
an exception between taking a lock and its `try` leaves the lock held: the next import waits for ever
(seen as a deadlock between the main thread and the publisher's preloading thread). A module's own body
is not such a place: an exception raised there unwinds as any import error does. Code that starts a process
and records it holds signals for those two steps itself (hostenv.processes.interrupts_held): that place is
known where it is written, and the held signal is delivered the moment it ends, not a moment later.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
import weakref

HANDLED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
DEFER_SECONDS = 0.02  # how soon a put-off signal is sent again: imports and finalizers take milliseconds
_WEAKREF_FILE = weakref.__file__  # weakref.finalize and WeakValueDictionary callbacks run here


class Terminated(KeyboardInterrupt):
    """The run was asked to stop by SIGTERM or SIGHUP; unwinds like Ctrl-C."""

    def __init__(self, signum: int) -> None:
        super().__init__(f"received {signal.Signals(signum).name}")
        self.signum = signum


_raised: list[int] = []
_wake: list[int] = []  # [write end of the pipe the redelivery thread reads, pid that installed it]


def _handler(signum: int, frame) -> None:
    # Nothing here may run Python code that waits or calls much: a signal can land inside this handler too
    # (Python runs handlers between bytecodes, even a handler's own), and inside importlib that is the hang.
    if _raised:
        print(f"dra-testbed: {signal.Signals(signum).name} received while cleaning up; finishing the cleanup first",
              file=sys.stderr, flush=True)
        return
    if unsafe_to_raise(frame) and _send_again(signum):
        return
    _raised.append(signum)
    if signum == signal.SIGINT:
        raise KeyboardInterrupt
    raise Terminated(signum)


def unsafe_to_raise(frame) -> str | None:
    """Why an exception must not be raised in `frame` now ('import', 'finalizer'), or None where it may.

    Only importlib's own code is unsafe, not a module body it runs: an exception raised in the body unwinds
    through importlib's `try`s as any import error does (so a signal during a long import is not put off
    for all of it). A finalizer swallows whatever is raised anywhere below it."""
    if frame is not None and _in_importlib(frame.f_code):
        return "import"
    hooks = {_code(sys.unraisablehook), _code(sys.__unraisablehook__)}
    while frame is not None:
        code = frame.f_code
        if code.co_name == "__del__" or code.co_filename == _WEAKREF_FILE or code in hooks:
            return "finalizer"
        if _in_importlib(code) and code.co_name == "cb":  # the module-lock weakref callback
            return "finalizer"
        frame = frame.f_back
    return None


def _in_importlib(code) -> bool:
    return code.co_filename.startswith("<frozen importlib")


def _code(fn) -> object:
    return getattr(getattr(fn, "__func__", fn), "__code__", None)


def _send_again(signum: int) -> bool:
    """Have the redelivery thread signal the main thread again shortly (by then it has left the import or
    finalizer): one write to its pipe, nothing that can wait. False where this process has no such thread
    (a fork of the one that installed it)."""
    if not _wake or _wake[1] != os.getpid():
        return False
    try:
        os.write(_wake[0], bytes((signum,)))
    except BlockingIOError:
        pass  # thousands of signals already wait to be sent again: this one adds nothing
    return True


def _redeliver(read_end: int) -> None:
    main = threading.main_thread().ident
    while True:
        signum = os.read(read_end, 1)[0]
        time.sleep(DEFER_SECONDS)
        try:
            signal.pthread_kill(main, signum)
        except ProcessLookupError:
            return  # the main thread has ended meanwhile: nothing left to stop


def install() -> bool:
    """Route SIGINT, SIGTERM and SIGHUP through the cleanup-friendly handler; False off the main thread
    (where Python allows no handlers) or when SIGHUP/SIGTERM are ignored on purpose (nohup)."""
    if threading.current_thread() is not threading.main_thread():
        return False
    if not _wake or _wake[1] != os.getpid():
        read_end, write_end = os.pipe()
        os.set_blocking(write_end, False)
        _wake[:] = [write_end, os.getpid()]
        threading.Thread(target=_redeliver, args=(read_end,), name="interrupt-redelivery", daemon=True).start()
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
