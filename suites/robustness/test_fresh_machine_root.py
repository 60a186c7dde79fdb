"""The fresh machine of `nox -s fresh` is a machine a container runtime works on: a container started inside
runs on its own root file system, neither refused nor on the host's, and the machine has its name files.

Found in turn: from a plain chroot runc's pivot_root(2) failed (EINVAL), so every `docker run` inside (the
kind node image build, kind's nodes) failed; from a chroot bound onto itself it succeeded, but the container
ran on the host's root, and the node image build wrote /etc/containerd/cri-base.json into the host's /etc.
Without /etc/hosts every `localhost` went to DNS, which answers NXDOMAIN.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from hostenv.mounts import mounted_below
from testbed.fresh import machine as fresh

# what runc does to start a container: a mount namespace of its own, the rootfs a mount point, pivot_root(".",
# ".") and the old root unmounted; then it holds the container until stdin closes. `docker exec` enters that
# container by setns(2), which puts the entrant at the root of the namespace's mount tree: `/probe whoami`
# entered that way says which root that is, by the /whoami each root holds.
PROBE = r"""
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/syscall.h>
#include <unistd.h>
int main(int argc, char **argv) {
    char who[64] = "";
    if (argc > 1) {
        FILE *f = fopen("/whoami", "r");
        if (f && fgets(who, sizeof who, f)) printf("root: %s", who);
        return 0;
    }
    if (unshare(CLONE_NEWNS)) { printf("unshare: %s\n", strerror(errno)); return 1; }
    mount(NULL, "/", NULL, MS_REC | MS_SLAVE, NULL);
    if (mount("/rootfs", "/rootfs", NULL, MS_BIND | MS_REC, NULL)) { printf("bind: %s\n", strerror(errno)); return 1; }
    if (chdir("/rootfs")) { printf("chdir: %s\n", strerror(errno)); return 1; }
    if (syscall(SYS_pivot_root, ".", ".")) { printf("pivot_root: %s\n", strerror(errno)); return 2; }
    if (umount2(".", MNT_DETACH)) { printf("umount: %s\n", strerror(errno)); return 2; }
    printf("pivoted\n");
    fflush(stdout);
    while (read(0, who, sizeof who) > 0) {}
    return 0;
}
"""


def _machine_root(tmp_path: Path) -> Path:
    """A root as debootstrap leaves it (a plain directory), with the probe and a container rootfs in it."""
    root = tmp_path / "machine"
    (root / "rootfs").mkdir(parents=True)
    (root / "etc").mkdir()
    (root / "whoami").write_text("the machine's\n")
    (root / "rootfs" / "whoami").write_text("its own\n")
    source = tmp_path / "probe.c"
    source.write_text(PROBE)
    subprocess.run(["gcc", "-static", "-o", str(root / "probe"), str(source)], check=True, capture_output=True)
    shutil.copy2(root / "probe", root / "rootfs" / "probe")
    return root


def _exec_view(prefix: list[str]) -> str:
    """Start the probe's container with `prefix`; what an exec into it finds at its root (or why it could not)."""
    container = subprocess.Popen([*prefix, "/probe"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        started = (container.stdout.readline() if container.stdout else "").strip()
        if started != "pivoted":
            return started
        entered = subprocess.run(["nsenter", f"--mount=/proc/{container.pid}/ns/mnt", "/probe", "whoami"],
                                 capture_output=True, text=True, timeout=30)
        return entered.stdout.strip() if entered.returncode == 0 else "the host's root (no /probe there)"
    finally:
        if container.stdin:
            container.stdin.close()
        container.wait(timeout=30)


@pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts need root")
def test_a_container_inside_the_fresh_machine_runs_on_its_own_root(tmp_path: Path) -> None:
    # setup: the machine's files; the controls: from a chroot, plain or bound onto itself, runc goes wrong
    root = _machine_root(tmp_path)
    assert _exec_view(["chroot", str(root)]) == "pivot_root: Invalid argument"
    subprocess.run(["mount", "--bind", str(root), str(root)], check=True)
    try:
        assert _exec_view(["chroot", str(root)]) == "the host's root (no /probe there)"
    finally:
        subprocess.run(["umount", str(root)], check=True)
    # assess: on the fresh machine an exec into a container finds the container's root; the machine's root is ours
    with fresh.machine(root, inside=["nsenter"]) as machine:
        assert _exec_view(machine.prefix) == "root: its own"
        inside = subprocess.run(["cat", f"/proc/{machine.holder}/root/whoami"], capture_output=True, text=True)
        assert inside.stdout.strip() == "the machine's"
        assert fresh.mount_namespace(machine.holder) == machine.namespace != fresh.mount_namespace(os.getpid())
    # teardown: its mounts went with its namespace, none was made in ours
    assert mounted_below(root) == []
    assert not (root / "proc" / "self").exists()
    shutil.rmtree(root)


def test_the_fresh_machine_gets_the_machines_name_files_and_localhost_resolves(tmp_path: Path) -> None:
    root = tmp_path / "machine"
    (root / "etc").mkdir(parents=True)
    fresh._copy_machine_files(root)
    for name in fresh.MACHINE_FILES:
        if Path(name).is_file():
            assert (root / name.lstrip("/")).read_text() == Path(name).read_text(), name
    hosts = (root / "etc" / "hosts").read_text().splitlines()
    assert any(line.split()[:1] in (["127.0.0.1"], ["::1"]) and "localhost" in line.split()[1:] for line in hosts), hosts
