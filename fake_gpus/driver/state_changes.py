"""Which nodes' fake-NVML state may have changed: inotify on each node's state directory.

The KWOK publisher keeps thousands of nodes' slices in line with their NVML state. Checking every node's
state files each second (two stat calls per node) cost it about a tenth of a core at 5,000 nodes, all the
time, taken from the scheduler on a saturated machine. The kernel says instead which directories saw a state
file written, replaced or removed; only those nodes' files are compared. A node whose directory cannot be
watched (no inotify here, the watch limit reached, no directory yet) is reported every time, as before.
"""

from __future__ import annotations

import ctypes
import errno
import os
import struct
import sys
import weakref
from pathlib import Path

# <sys/inotify.h>
IN_CLOSE_WRITE, IN_MOVED_FROM, IN_MOVED_TO, IN_DELETE = 0x8, 0x40, 0x80, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_Q_OVERFLOW, IN_IGNORED = 0x400, 0x800, 0x4000, 0x8000
# a state file written in place ends with a close, one replaced (as the library writes) arrives by rename;
# no IN_MODIFY / IN_CREATE: every write of the library's temporary file would queue events of no interest
FILE_EVENTS = IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO | IN_DELETE
DIR_GONE = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED
_EVENT = struct.Struct("iIII")  # wd, mask, cookie, len; then len bytes of NUL-padded name


def _libc() -> ctypes.CDLL | None:
    try:
        libc = ctypes.CDLL(None, use_errno=True)  # the C library Python runs on (no ldconfig lookup)
        libc.inotify_init1, libc.inotify_add_watch, libc.inotify_rm_watch  # noqa: B018 - present on Linux only
    except (OSError, AttributeError):
        return None
    libc.inotify_add_watch.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
    return libc


class StateChanges:
    """Nodes whose state files (`files`, names in each node's directory) changed since the last `changed()`."""

    def __init__(self, files: tuple[str, ...]) -> None:
        self.files = {name.encode() for name in files}
        self._libc = _libc()
        self.fd: int | None = None
        self._close = None
        self.warned = False
        if self._libc is not None:
            fd = self._libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
            if fd >= 0:
                self.fd = fd
                self._close = weakref.finalize(self, os.close, fd)
            else:
                self._warn(f"inotify_init1: {os.strerror(ctypes.get_errno())}")
        self.node_of: dict[int, str] = {}  # watch descriptor -> node
        self.watch_of: dict[str, int] = {}
        self.unwatched: set[str] = set()  # reported every time
        self.pending: set[str] = set()

    def _warn(self, why: str) -> None:
        """Once: polling works, but costs two stat calls per unwatched node every poll."""
        if not self.warned:
            self.warned = True
            print(f"publisher: {why}; polling the state files of nodes not watched", file=sys.stderr, flush=True)

    def close(self) -> None:
        """Release the inotify descriptor (also done when the object goes); every node is polled after it."""
        if self._close is not None:
            self._close()
        self.fd = None
        self.unwatched.update(self.watch_of)
        self.node_of.clear()
        self.watch_of.clear()

    def watch(self, node: str, directory: Path) -> None:
        """Report `node` when a state file in `directory` changes from now on. Call it again after the
        directory was made anew (a fresh provision): the old watch went with the old directory."""
        wd = -1
        if self.fd is not None:
            wd = self._libc.inotify_add_watch(self.fd, os.fsencode(directory), FILE_EVENTS | DIR_GONE)
            if wd < 0 and ctypes.get_errno() != errno.ENOENT:  # ENOENT: no directory yet, not worth a word
                self._warn(f"inotify_add_watch {directory}: {os.strerror(ctypes.get_errno())}")
        if wd < 0:  # polled instead
            self._drop(node)
            self.unwatched.add(node)
            return
        old = self.watch_of.get(node)
        if old is not None and old != wd:  # another directory now (the old one removed or moved away)
            self._drop(node)
        self.unwatched.discard(node)
        self.node_of[wd], self.watch_of[node] = node, wd

    def unwatch(self, node: str) -> None:
        """`node` went: never report it again."""
        self._drop(node)
        self.unwatched.discard(node)
        self.pending.discard(node)

    def _drop(self, node: str) -> None:
        wd = self.watch_of.pop(node, None)
        if wd is not None and self.node_of.pop(wd, None) is not None and self.fd is not None:
            self._libc.inotify_rm_watch(self.fd, wd)  # EINVAL when the kernel dropped it already: harmless

    def changed(self) -> set[str]:
        """Nodes to check now: those whose state files changed or whose directory went (each once), and
        every unwatched node; every node when the kernel's event queue overflowed."""
        while self.fd is not None:
            try:
                data = os.read(self.fd, 1 << 16)
            except BlockingIOError:
                break
            offset = 0
            while offset < len(data):
                wd, mask, _, size = _EVENT.unpack_from(data, offset)
                name = data[offset + _EVENT.size: offset + _EVENT.size + size].rstrip(b"\0")
                offset += _EVENT.size + size
                if mask & IN_Q_OVERFLOW:
                    self.pending.update(self.watch_of)
                    continue
                node = self.node_of.get(wd)
                if node is None:
                    continue
                if mask & DIR_GONE:  # checked (its files went with it) and polled until watched again
                    self.pending.add(node)
                    self._drop(node)  # node_of and watch_of are kept inverse: this wd is the node's watch
                    self.unwatched.add(node)
                elif name in self.files:
                    self.pending.add(node)
        found, self.pending = self.pending | self.unwatched, set()
        return found
