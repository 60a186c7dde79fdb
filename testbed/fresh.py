"""`nox -s fresh`: the README's test command, unchanged, in a throwaway Debian chroot holding only Go,
Python and gcc, with empty caches: the proof that the README's commands are the whole set-up.

The chroot is made with debootstrap from Debian's packages (gcc and what Debian's minbase brings); Go and
Python are copied in from this machine, as a fresh machine of this kind has them. The repository is a
clean clone of the current commit. Everything else (docker.io, debootstrap, libseccomp-dev, the
toolchain, images) must be installed or built by the project inside. Afterwards every process whose root
is the chroot is stopped, every mount under it undone and the chroot removed.

Needs root (debootstrap, chroot, mounts). It starts its own dockerd inside, so no other dockerd may run
on the host meanwhile (both would manage the same iptables chains and bridge).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from hostenv.processes import stream, terminate
from testbed import leftovers, progress
from testbed.clusters.kind.rootfs import debootstrap, unmount_below

README_TEST_COMMAND = "python3 -m pip install --quiet nox && python3 -m nox -s tests"
PACKAGES = ("gcc", "libc6-dev", "make", "binutils", "git", "ca-certificates", "procps", "iproute2")
MOUNTS = (("proc", "proc", None), ("sysfs", "sys", None), (None, "dev", "/dev"), (None, "dev/pts", "/dev/pts"),
          (None, "sys/fs/cgroup", "/sys/fs/cgroup"), ("tmpfs", "run", None), ("tmpfs", "tmp", None))
REPO = Path(__file__).resolve().parents[1]


class FreshError(RuntimeError):
    """The fresh-machine run cannot start here; one line."""


def _check_host() -> None:
    if os.geteuid() != 0:
        raise FreshError("nox -s fresh needs root (debootstrap, chroot and mounts); without root, run the README's "
                         "two commands on a fresh VM or container of this kind instead")
    if any(Path(line.split(" ", 1)[0]).name == "dockerd" for line in leftovers.processes().values()):
        raise FreshError("a dockerd runs on this host; the chroot starts its own (same iptables chains and bridge): "
                         "stop it first (`dra-testbed image stop-engine` for ours)")


def _copy_runtime(root: Path) -> dict[str, str]:
    """Go and this Python, copied to the same paths inside; returns the PATH entries to use."""
    go = Path(shutil.which("go") or "/usr/local/go/bin/go").resolve().parents[1]  # GOROOT
    python = Path(sys.base_prefix)
    for source in (go, python):
        shutil.copytree(source, root / source.relative_to("/"), symlinks=True, dirs_exist_ok=True)
    return {"go": str(go / "bin"), "python": str(python / "bin")}


def _mount_all(root: Path) -> None:
    for fstype, target, bind in MOUNTS:
        point = root / target
        point.mkdir(parents=True, exist_ok=True)
        args = ["mount", "--rbind", bind, str(point)] if bind else ["mount", "-t", fstype, fstype, str(point)]
        subprocess.run(args, check=True, capture_output=True)
    shutil.copy2("/etc/resolv.conf", root / "etc" / "resolv.conf")  # registries by name, as on the host


def _stop_processes_in(root: Path) -> list[int]:
    """Stop every process whose root directory is the chroot; returns their pids."""
    target = str(root.resolve())
    inside = []
    for pid in leftovers.processes():
        try:
            if os.readlink(f"/proc/{pid}/root") == target:
                inside.append(pid)
        except OSError:
            continue
    for pid in inside:
        terminate(pid, grace=10)
    return inside


def run(workdir: Path, keep: bool = False) -> int:
    """Make the chroot under `workdir`, run the README's test command in it, clean up; its exit code."""
    _check_host()
    before = leftovers.snapshot()
    root = Path(tempfile.mkdtemp(prefix="dra-testbed-fresh-", dir=workdir))
    log = workdir / f"{root.name}.log"
    started = time.monotonic()
    try:
        with progress.step(f"debootstrap of the fresh machine ({root})") as step:
            debootstrap(root, PACKAGES, workdir / f"{root.name}.debootstrap.log", step)
        paths = _copy_runtime(root)
        subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(root / "work" / "repo")], check=True)
        _mount_all(root)
        env = {"HOME": "/root", "CI": "true", "LANG": "C.UTF-8",
               "PATH": f"{paths['go']}:{paths['python']}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"}
        command = ["chroot", str(root), "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in env.items()],
                   "bash", "-c", f"cd /work/repo && {README_TEST_COMMAND}"]
        progress.note(f"fresh machine: `{README_TEST_COMMAND}` (log: {log})")
        with log.open("w") as sink, progress.step("the README's test command on the fresh machine") as step:
            def take(line: str) -> None:
                sink.write(line)
                sink.flush()
                step.update(line.strip()[:70])

            code = stream(command, take)
        tail = log.read_text(errors="replace").strip().splitlines()[-3:]
        progress.note(f"fresh machine: exit {code} after {(time.monotonic() - started) / 60:.1f} min; last lines: {' | '.join(tail)}")
        return code
    finally:
        stopped = _stop_processes_in(root)
        unmount_below(root)
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        left = leftovers.diff(before, leftovers.snapshot())
        progress.note(f"fresh machine: stopped {len(stopped)} processes left inside; left on the host: {left.summary()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.fresh", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/var/tmp", help="where the chroot is made (needs ~15 GB free)")
    parser.add_argument("--keep", action="store_true", help="keep the chroot afterwards (for a look inside)")
    args = parser.parse_args(argv)
    from testbed import interrupts

    interrupts.install()
    try:
        return run(Path(args.workdir), keep=args.keep)
    except FreshError as exc:
        print(f"fresh: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fresh: interrupted; cleaned up", file=sys.stderr)
        return interrupts.exit_code()


if __name__ == "__main__":
    sys.exit(main())
