"""Processes the test bed starts and must stop: is one alive, and end it (politely first)."""

from __future__ import annotations

import os
import signal
import time


def alive(pid: int) -> bool:
    """Whether a process of that pid exists (and is not a zombie of ours, which is reaped here)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child that exited: collect it
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def terminate(pid: int, grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, a process that is still alive."""
    if not alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    while alive(pid):  # SIGKILL cannot be ignored; wait for the kernel to finish it
        time.sleep(0.02)
