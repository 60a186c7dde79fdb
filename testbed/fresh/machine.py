"""`nox -s fresh`: the README's test command, unchanged, in a throwaway Debian chroot holding only Go,
Python and gcc, with empty caches: the proof that the README's commands are the whole set-up.

The chroot is made with debootstrap from Debian's packages (gcc and what Debian's minbase brings); Go and
Python are copied in from this machine, as a fresh machine of this kind has them. The repository is a
clean clone of the current commit. Everything else (docker.io, debootstrap, libseccomp-dev, the
toolchain, images) must be installed or built by the project inside. Afterwards every process of the
machine is stopped, its mount namespace goes with them, and the chroot is removed.

Needs root (debootstrap, namespaces, mounts). The machine's root is the root of a mount namespace of its own
(testbed/fresh/root.py: containers inside must not see the host's root), and it runs in a network namespace
of its own (testbed/host/netns.py): the dockerd and kind networks it starts do not meet any dockerd of the host.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tempfile
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from hostenv.dirs import shared_inputs
from hostenv.mounts import mounted_below, unmount_below
from hostenv.processes import stream, terminate
from testbed.host import hostdeps, leftovers, progress
from testbed.host import netns as freshnet
from testbed.host.netns import private_network
from testbed.clusters.kind.images.rootfs import debootstrap
from testbed.errors import EnvironmentProblem

FRESH_SITE = ("pip", "setuptools", "_distutils_hack", "distutils-precedence.pth", "README")  # what ensurepip leaves
CA_SETTINGS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO",
               "NODE_EXTRA_CA_CERTS")
README_COMMANDS = {session: f"python3 -m pip install --quiet nox && python3 -m nox -s {session}" for session in ("tests", "e2e")}
# the test input CI gives (.ci/run): NVIDIA's plugin, copied in beside the clone, never into it
# NVIDIA's plugin as this checkout finds it; the fresh machine gets it where a clone finds it with nothing set
NVIDIA_PLUGIN = Path(os.environ.get("DRA_TESTBED_NVIDIA_PLUGIN") or shared_inputs() / "vendor" / "dra-driver-nvidia-gpu" / "gpu-kubelet-plugin")
PACKAGES = ("gcc", "libc6-dev", "make", "binutils", "git", "ca-certificates", "procps", "iproute2")
MACHINE_FILES = ("/etc/resolv.conf", "/etc/hosts", "/etc/hostname")
REPO = Path(__file__).resolve().parents[2]
# the containers folder of the Docker engine the project starts inside (hostenv.dirs' cache under the machine's
# HOME, /root; testbed/host/docker/dockerd.py's engine_dir()/data)
MACHINE_CONTAINERS = Path("root/.cache/dra-testbed/docker/data/containers")
CGROUP_CONTAINER = re.compile(r"/docker/([0-9a-f]{64})\b")  # how dockerd names a container's cgroup
FRESHROOT = Path(__file__).with_name("root.py")  # run by the host's Python as a script: stdlib only


class FreshError(EnvironmentProblem):
    """The fresh-machine run cannot start here; one line."""


def _check_host() -> None:
    """Root, and the host's packages this run uses (installed here when missing, as every feature does)."""
    if os.geteuid() != 0:
        raise FreshError("nox -s fresh needs root (debootstrap, chroot and mounts); without root, run the README's "
                         "two commands on a fresh VM or container of this kind instead")
    try:
        hostdeps.ensure("fresh")
    except hostdeps.HostDepsMissing as exc:
        raise FreshError(str(exc)) from exc


def _runtime_paths() -> tuple[Path, Path]:
    """GOROOT and the prefix of this Python on the host (the same paths inside)."""
    return Path(shutil.which("go") or "/usr/local/go/bin/go").resolve().parents[1], Path(sys.base_prefix)


def _copy_runtime(root: Path) -> None:
    """Go and this Python, copied to the same paths inside; of Python's site-packages only what a fresh
    install has (pip, setuptools), so that the README's `pip install nox` really installs it."""
    go, python = _runtime_paths()
    shutil.copytree(go, root / go.relative_to("/"), symlinks=True, dirs_exist_ok=True)
    site = Path(sysconfig.get_path("purelib", vars={"base": str(python)}))

    def installed_by_hand(folder: str, names: list[str]) -> set[str]:
        return {n for n in names if not n.startswith(FRESH_SITE)} if Path(folder) == site else set()

    shutil.copytree(python, root / python.relative_to("/"), symlinks=True, dirs_exist_ok=True, ignore=installed_by_hand)


def _trust_host_cas(root: Path, inside: list[str]) -> dict[str, str]:
    """The machine's own certificate authorities (a TLS-terminating proxy's, say: part of the machine, like
    its resolver) installed in the chroot the Debian way, and the CA settings of the environment that name
    a file present inside; returns those settings."""
    local = Path("/usr/local/share/ca-certificates")
    if local.is_dir():
        target = root / local.relative_to("/")
        target.mkdir(parents=True, exist_ok=True)
        for cert in local.glob("*.crt"):
            shutil.copy2(cert, target / cert.name)
        subprocess.run([*inside, "update-ca-certificates"], check=True, capture_output=True)
    return {key: value for key, value in os.environ.items()
            if key in CA_SETTINGS and (root / value.lstrip("/")).exists()}


@dataclass(frozen=True)
class Machine:
    """The fresh machine while it is up: the command prefix that runs a command on it (in its network and
    mount namespaces, at its root), and its mount namespace (`mnt:[INODE]`), which tells its processes."""

    prefix: list[str]
    namespace: str
    holder: int  # the process that holds the namespace (testbed/fresh/root.py)


@contextmanager
def machine(root: Path, inside: list[str]) -> Iterator[Machine]:
    """The fresh machine up: `root` the root of a mount namespace of its own (testbed/fresh/root.py) with its
    /proc, /sys, /dev, /run and /tmp, held while the block runs; `inside` runs a command in its network."""
    holder = subprocess.Popen([*inside, sys.executable, str(FRESHROOT), str(root)], stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        if (holder.stdout.readline() if holder.stdout else "").strip() != "ready":
            raise FreshError(f"the fresh machine's root did not come up: {holder.communicate(timeout=30)[1].strip()}")
        yield Machine([*inside, f"--mount=/proc/{holder.pid}/ns/mnt"], mount_namespace(holder.pid) or "", holder.pid)
    finally:
        if holder.stdin:
            holder.stdin.close()
        try:
            holder.wait(timeout=30)
        except subprocess.TimeoutExpired:
            holder.kill()
            holder.wait()


def mount_namespace(pid: int) -> str | None:
    """The mount namespace of process `pid` (`mnt:[INODE]`), None when it is gone."""
    try:
        return os.readlink(f"/proc/{pid}/ns/mnt")
    except OSError:
        return None


def _copy_machine_files(root: Path) -> None:
    """The machine's own name files, which debootstrap does not write: the resolver (registries by name), and
    /etc/hosts with /etc/hostname (without them `localhost` and the machine's name go to DNS, which answers
    NXDOMAIN for both)."""
    for name in MACHINE_FILES:
        if Path(name).is_file():
            shutil.copy2(name, root / name.lstrip("/"))


def _left_by(root: Path, namespace: str | None, containers: set[str]) -> list[str]:
    """What the fresh machine left: its processes (those of its containers too), mounts under it in the host's
    namespace, the chroot, its network."""
    left = [f"pid {pid}" for pid in _processes_of(namespace, containers)]
    left += [f"mount {m}" for m in mounted_below(root)]
    left += [f"dir {root}"] if root.exists() else []
    return left + freshnet.leftovers()


def _containers_of(root: Path) -> set[str]:
    """Ids of the containers the machine's Docker engine has made (read before the chroot goes)."""
    folder = root / MACHINE_CONTAINERS
    return {entry.name for entry in folder.iterdir()} if folder.is_dir() else set()


def in_containers(containers: set[str], proc: Path = Path("/proc")) -> list[int]:
    """The processes in the cgroup of one of `containers`: a kind node's systemd and kubelet have mount
    namespaces of their own, and outlive a dockerd killed before it stopped them."""
    found = []
    for entry in proc.iterdir() if containers else ():
        try:
            cgroups = (entry / "cgroup").read_text() if entry.name.isdigit() else ""
        except OSError:  # gone meanwhile
            continue
        if any(cid in containers for cid in CGROUP_CONTAINER.findall(cgroups)):
            found.append(int(entry.name))
    return found


def _processes_of(namespace: str | None, containers: set[str], spare: int | None = None) -> list[int]:
    """The machine's processes but `spare`: those in its mount namespace (`mnt:[INODE]`; none when it is unknown),
    then those of its containers."""
    own = [pid for pid in leftovers.processes() if namespace and pid != spare and mount_namespace(pid) == namespace]
    return own + [pid for pid in in_containers(containers) if pid not in own]


def _stop_processes_of(namespace: str | None, containers: set[str], spare: int | None = None) -> list[int]:
    """Stop every process of the machine but `spare`; its mount namespace, with every mount made inside, goes
    with the last of them. Returns their pids."""
    inside = _processes_of(namespace, containers, spare)
    for pid in inside:
        terminate(pid, grace=10)
    return inside


def run(workdir: Path, sessions: list[str], keep: bool = False) -> int:
    """Make the chroot under `workdir`, run the README's commands of `sessions` in it in turn (each timed),
    clean up; the first non-zero exit code, else 0."""
    _check_host()
    before = leftovers.snapshot()
    root = Path(tempfile.mkdtemp(prefix="dra-testbed-fresh-", dir=workdir))
    namespace: str | None = None
    stopped: list[int] = []
    try:
        with private_network() as inside:
            _make(root, workdir)
            with machine(root, inside) as fresh_machine:
                namespace = fresh_machine.namespace
                trust = _trust_host_cas(root, fresh_machine.prefix)
                codes = [_run_command(fresh_machine.prefix, session, workdir / f"{root.name}.{session}.log", trust) for session in sessions]
                # its dockerd and the like, before the network they use goes
                stopped = _stop_processes_of(namespace, _containers_of(root), spare=fresh_machine.holder)
                return next((code for code in codes if code), 0)
    finally:
        containers = _containers_of(root)
        stopped += _stop_processes_of(namespace, containers)
        unmount_below(root)  # none made from the host; kept so that removing the chroot never reaches into a mount
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
        progress.note(f"fresh machine: stopped {len(stopped)} processes left inside; what it left: "
                      f"{_left_by(root, namespace, containers) or 'nothing'}")
        changed = leftovers.diff(before, leftovers.snapshot())  # on a shared machine: other runs' changes too
        progress.note(f"fresh machine: host changes meanwhile (any run's): {changed.summary()}")


def _make(root: Path, workdir: Path) -> None:
    """The fresh machine's files: Debian, Go, Python, a clone of the repository, the machine's name files."""
    with progress.step(f"debootstrap of the fresh machine ({root})") as step:
        debootstrap(root, PACKAGES, workdir / f"{root.name}.debootstrap.log", step)
    _copy_runtime(root)
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(root / "work" / "repo")], check=True)
    if NVIDIA_PLUGIN.is_file():
        target = root / "work" / "shared" / "vendor" / "dra-driver-nvidia-gpu" / "gpu-kubelet-plugin"  # beside /work/repo
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(NVIDIA_PLUGIN, target)
    _copy_machine_files(root)


def _run_command(on_machine: list[str], session: str, log: Path, trust: dict[str, str]) -> int:
    """One README command in the chroot, with CI's settings (.ci/run); its exit code, timed."""
    go, python = (path / "bin" for path in _runtime_paths())
    # PYTHONUNBUFFERED: pytest's dots reach the log (and the progress line) as they come, not at the end
    env = {**trust, "HOME": "/root", "CI": "true", "LANG": "C.UTF-8", "DRA_TESTBED_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "PATH": f"{go}:{python}:/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"}
    command = [*on_machine, "/usr/bin/env", "-i", *[f"{k}={v}" for k, v in env.items()],
               "bash", "-c", f"cd /work/repo && {README_COMMANDS[session]}"]
    progress.note(f"fresh machine: `{README_COMMANDS[session]}` (log: {log})")
    started = time.monotonic()
    with log.open("w") as sink, progress.step(f"`nox -s {session}` on the fresh machine") as step:
        def take(line: str) -> None:
            sink.write(line)
            sink.flush()
            step.update(line.strip()[:70])

        code = stream(command, take)
    tail = log.read_text(errors="replace").strip().splitlines()[-3:]
    progress.note(f"fresh machine: `nox -s {session}` exit {code} after {(time.monotonic() - started) / 60:.1f} min; "
                  f"last lines: {' | '.join(tail)}")
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m testbed.fresh", description=__doc__.splitlines()[0])
    parser.add_argument("--workdir", default="/var/tmp", help="where the chroot is made (needs ~15 GB free)")
    parser.add_argument("--sessions", default="tests,e2e", help="README commands to run in turn, by nox session "
                        "(tests, e2e; default tests,e2e: the test command cold first, it proves the whole set-up)")
    parser.add_argument("--keep", action="store_true", help="keep the chroot afterwards (for a look inside)")
    args = parser.parse_args(argv)
    sessions = [name.strip() for name in args.sessions.split(",") if name.strip()]
    if not sessions or any(name not in README_COMMANDS for name in sessions):
        parser.error(f"--sessions {args.sessions!r}: a comma list of {', '.join(README_COMMANDS)}")
    from testbed.host import interrupts

    interrupts.install()
    try:
        return run(Path(args.workdir), sessions, keep=args.keep)
    except FreshError as exc:
        print(f"fresh: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("fresh: interrupted; cleaned up", file=sys.stderr)
        return interrupts.exit_code()


if __name__ == "__main__":
    sys.exit(main())
