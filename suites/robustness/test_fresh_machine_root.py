"""The fresh machine of `nox -s fresh` is a machine a container runtime works on: its root is a mount point,
so runc's pivot_root(2) succeeds in it, and it has the machine's name files, so `localhost` resolves.

Both were missing once: every `docker run` inside (the kind node image build, kind's nodes) failed with
EINVAL from pivot_root, and without /etc/hosts every `localhost` went to DNS, which answers NXDOMAIN.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hostenv.mounts import mounted_below, unmount_below
from testbed import fresh

# what runc does to start a container: a mount namespace of its own, the rootfs bound, pivot_root into it
PROBE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(void) {
    if (unshare(CLONE_NEWNS)) { printf("unshare: %s\n", strerror(errno)); return 1; }
    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL);  /* EINVAL when / is no mount point: pivot_root says so */
    mkdir("/rootfs", 0755);
    if (mount("/rootfs", "/rootfs", NULL, MS_BIND, NULL)) { printf("bind: %s\n", strerror(errno)); return 1; }
    mkdir("/rootfs/old", 0755);
    if (chdir("/rootfs")) { printf("chdir: %s\n", strerror(errno)); return 1; }
    if (syscall(SYS_pivot_root, ".", "old")) { printf("pivot_root: %s\n", strerror(errno)); return 2; }
    printf("pivot_root: ok\n");
    return 0;
}
"""

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="chroot and mounts need root")


def _probe_in(root: Path) -> str:
    out = subprocess.run(["chroot", str(root), "/probe"], capture_output=True, text=True, timeout=30)
    return out.stdout.strip() or out.stderr.strip()


def test_a_container_runtime_can_pivot_root_in_the_fresh_machine_and_localhost_resolves(tmp_path: Path) -> None:
    # setup: a root that is a plain directory, as debootstrap leaves it, with a static probe in it
    root = tmp_path / "machine"
    (root / "etc").mkdir(parents=True)
    source = tmp_path / "probe.c"
    source.write_text(PROBE)
    subprocess.run(["gcc", "-static", "-o", str(root / "probe"), str(source)], check=True, capture_output=True)
    assert _probe_in(root) == "pivot_root: Invalid argument"  # the control: a plain chroot is what runc refuses
    try:
        # assess: the fresh machine's mounts make its root a mount point, and it gets the machine's name files
        fresh._mount_all(root, inside=[])
        assert _probe_in(root) == "pivot_root: ok"
        for name in fresh.MACHINE_FILES:
            if Path(name).is_file():
                assert (root / name.lstrip("/")).read_text() == Path(name).read_text(), name
        hosts = (root / "etc" / "hosts").read_text().split("\n")
        assert any(line.split()[:1] in (["127.0.0.1"], ["::1"]) and "localhost" in line.split()[1:] for line in hosts)
    finally:
        # teardown: nothing of it stays mounted (the chroot's own root mount included)
        unmount_below(root)
    assert mounted_below(root) == []
    shutil.rmtree(root)
