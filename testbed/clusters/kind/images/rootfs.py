"""Debian bookworm root file systems from Debian's own packages (debootstrap), cached as tarballs.

Two flavours: `node` (systemd and what kubelet, containerd and kube-proxy call on a host) and `base`
(Python and iptables: the base of kube-proxy, driver and workload images). Each tarball's name holds a
hash of its package list and mirror, so changing either builds a fresh one.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

from hostenv.dirs import cache_root
from hostenv.mounts import unmount_below
from hostenv.processes import stream
from testbed.errors import EnvironmentProblem
from testbed.host import hostdeps, progress

SUITE = "bookworm"
MIRROR_ENV = "DRA_TESTBED_DEBIAN_MIRROR"
DEFAULT_MIRROR = "http://deb.debian.org/debian"

PACKAGES: dict[str, tuple[str, ...]] = {
    "node": (
        "systemd", "systemd-sysv", "dbus", "iptables", "nftables", "iproute2", "ethtool", "conntrack",
        "kmod", "libseccomp2", "ca-certificates", "procps", "mount", "util-linux", "bash", "socat",
        "ebtables", "pigz", "jq",
    ),
    "base": ("python3", "ca-certificates", "iptables", "conntrack", "iproute2", "procps"),
}


class RootfsError(EnvironmentProblem):
    """debootstrap is missing or failed."""


def mirror() -> str:
    """Debian mirror for debootstrap: $DRA_TESTBED_DEBIAN_MIRROR or deb.debian.org."""
    return os.environ.get(MIRROR_ENV, DEFAULT_MIRROR)


def rootfs_tarball(flavour: str) -> Path:
    """Where the tarball of `flavour` is cached."""
    digest = hashlib.sha256(f"{SUITE} {mirror()} {' '.join(PACKAGES[flavour])}".encode()).hexdigest()[:12]
    return cache_root() / "images" / "debian" / f"{SUITE}-{flavour}-{digest}.tar"


def _debootstrap() -> str:
    try:
        hostdeps.ensure("debootstrap")
    except hostdeps.HostDepsMissing as exc:
        raise RootfsError(str(exc)) from exc
    return shutil.which("debootstrap") or "/usr/sbin/debootstrap"


def debootstrap(root: Path, packages: tuple[str, ...], log: Path, step: progress.Step) -> None:
    """A minimal Debian root with `packages` at `root`; on failure or interruption debootstrap and its dpkg
    runs are stopped and nothing stays mounted under `root`."""
    args = [_debootstrap(), "--variant=minbase", f"--include={','.join(packages)}", SUITE, str(root), mirror()]
    with log.open("w") as sink:
        def take(line: str) -> None:
            sink.write(line)
            if line.startswith("I: "):
                step.update(line[3:].strip()[:70])

        try:
            code = stream(args, take)
        finally:
            unmount_below(root)
    if code != 0:
        raise RootfsError(f"debootstrap failed (log: {log})")


def ensure_rootfs(flavour: str) -> Path:
    """A tarball of a Debian root of `flavour`, built with debootstrap when not cached."""
    target = rootfs_tarball(flavour)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.with_suffix(".log")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=f".{flavour}-") as tmp:
        root = Path(tmp) / "root"
        with progress.step(f"debootstrap {SUITE} ({flavour} root; log: {log})") as step:
            debootstrap(root, PACKAGES[flavour], log, step)
        # apt lists and the package cache are not needed in an image and are large
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for entry in (root / junk).glob("*"):
                if entry.is_file():
                    entry.unlink()
        partial = target.with_suffix(".partial")
        try:
            with progress.step(f"packing the {flavour} root"):
                subprocess.run(["tar", "--numeric-owner", "--xattrs", "-C", str(root), "-cf", str(partial), "."], check=True)
            partial.rename(target)
        finally:
            partial.unlink(missing_ok=True)  # interrupted or failed: no half tarball
    return target
