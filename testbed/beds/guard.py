"""A bed's guardian: a small process, in a session of its own, that removes the bed when the process owing its
teardown dies without doing it.

An exception unwinds through every cleanup, but nothing runs after SIGKILL, and the usual runners send it
soon after Ctrl-C: `subprocess.run` kills its child 0.25 s after the interrupt reaches the parent (a pytest
test running `dra-testbed conformance`), nox its session 0.5 s after. Such a run's bed (a KWOK control plane,
a kind cluster) would be left running until `dra-testbed down`. The owner holds the write end of a pipe whose
read end the guardian waits on: "done" before the end means the owner tore the bed down (or no longer owes
it); the end alone (the kernel closes a dead process's files, however it died) means the guardian removes it.

    python -m testbed.beds.guard MODULE:CLASS NAME FD     # started by `watch`, never by hand
"""

from __future__ import annotations

import importlib
import os
import signal
import subprocess
import sys
from pathlib import Path

DONE = b"done"
_REPO = Path(__file__).resolve().parents[2]


def watch(cluster) -> int:
    """Start the guardian of `cluster`; returns the write end to hand to `release`. The end is not inherited
    by the owner's other children (Python's descriptors are non-inheritable), so only the owner's end counts."""
    read_end, write_end = os.pipe()
    target = f"{type(cluster).__module__}:{type(cluster).__qualname__}"
    # the project importable whatever the owner's working directory, as the publisher and the stand-in kubelet get it
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in (str(_REPO), os.environ.get("PYTHONPATH", "")) if p)}
    try:
        subprocess.Popen([sys.executable, "-m", "testbed.beds.guard", target, cluster.name, str(read_end)], pass_fds=(read_end,),
                         start_new_session=True, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                         env=env)
    finally:
        os.close(read_end)
    return write_end


def release(write_end: int) -> None:
    """The owner no longer needs the guardian (the bed is down, or kept): it ends without doing anything."""
    try:
        os.write(write_end, DONE)
    finally:
        os.close(write_end)


def main(argv: list[str]) -> int:
    # a session of its own already keeps a terminal's Ctrl-C and hang-up away; a group signal sent by hand too
    for signum in (signal.SIGINT, signal.SIGHUP):
        signal.signal(signum, signal.SIG_IGN)
    target, name, fd = argv[0], argv[1], int(argv[2])
    said = b""
    while chunk := os.read(fd, 64):
        said += chunk
    if said == DONE:
        return 0
    module, cls = target.split(":")
    # every driver under test registered, so the backend's delete stops whichever of them runs (this package's
    # import does it too, through the life cycle; said here because the delete depends on it)
    importlib.import_module("testbed.clusters.registry")
    getattr(importlib.import_module(module), cls)(name).delete()  # safe on a half-made or half-removed cluster
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
