"""The fresh machine's root: a directory made the root of a mount namespace of its own, as a container
runtime makes a container's root (pivot_root, not chroot).

Why not chroot: runc, which every `docker run` inside calls, pivot_roots from the caller's root. From a
chroot whose root is a plain directory the kernel refuses that (EINVAL); from a chroot whose root is a bind
mount it succeeds but attaches the container's root where the chroot's was, and the container then runs on
the host's own root file system. With the machine's root the root mount of its namespace, runc inside works
as on any machine, and whatever is mounted inside (dockerd's overlays, kind's volumes) stays inside and goes
with the namespace.

Run as a script by the host's Python (stdlib only): `python3 root.py ROOT` makes the namespace, mounts
the machine's /proc, /sys, /dev, /run and /tmp, pivots into ROOT, prints `ready`, and holds the namespace
until its standard input closes; `nsenter --mount=/proc/PID/ns/mnt` then enters the machine at its root.
"""

from __future__ import annotations

import ctypes
import os
import sys

CLONE_NEWNS = 0x00020000
MS_BIND, MS_REC, MS_PRIVATE = 0x1000, 0x4000, 0x40000
MNT_DETACH = 2
SYS_PIVOT_ROOT = {"x86_64": 155, "aarch64": 41}.get(os.uname().machine, 155)  # no libc wrapper for it
# (fstype or None, path inside, bind source or None): what a booted machine has mounted
MOUNTS = (("proc", "proc", None), ("sysfs", "sys", None), (None, "dev", "/dev"),
          (None, "sys/fs/cgroup", "/sys/fs/cgroup"), ("tmpfs", "run", None), ("tmpfs", "tmp", None))

_libc = ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        error = ctypes.get_errno()
        raise OSError(error, f"{what}: {os.strerror(error)}")


def _mount(source: str | None, target: str, fstype: str | None, flags: int) -> None:
    _check(_libc.mount(source and source.encode(), target.encode(), fstype and fstype.encode(), flags, None),
           f"mount {source or fstype} on {target}")


def enter_root(root: str) -> None:
    """Make `root` the root of a new mount namespace of the calling process, with the machine's mounts."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare(CLONE_NEWNS)")
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing made here reaches the host's namespace
    _mount(root, root, None, MS_BIND | MS_REC)  # pivot_root wants the new root a mount point
    for fstype, inside, source in MOUNTS:
        target = os.path.join(root, inside)
        os.makedirs(target, exist_ok=True)
        if source:
            _mount(source, target, None, MS_BIND | MS_REC)
        else:
            _mount(fstype, target, fstype, 0)
    os.chdir(root)
    # runc's way: the old root lands on top of the new one, then comes off; no put_old directory is left
    _check(_libc.syscall(SYS_PIVOT_ROOT, b".", b"."), "pivot_root")
    _check(_libc.umount2(b".", MNT_DETACH), "umount the old root")
    os.chdir("/")


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: root.py ROOT (holds ROOT's mount namespace until stdin closes)", file=sys.stderr)
        return 2
    try:
        enter_root(argv[0])
    except OSError as exc:
        print(f"freshroot: {exc}", file=sys.stderr)
        return 1
    print("ready", flush=True)
    sys.stdin.read()  # hold the namespace until the caller closes our stdin (or goes)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
