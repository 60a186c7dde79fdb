"""Debian packages the project's features need on the host, installed by the project itself, once.

Each feature names its packages and, per package, a file that proves it is there (so a Docker or a
debootstrap installed some other way counts too). `ensure(feature, ...)` installs what is missing in
one apt-get run (update, then install, apt's progress lines shown as they come), under a machine-wide
lock. When it cannot (not root, no apt-get, apt failed) it raises HostDepsMissing with one line: what is
missing, for which feature, and the command that installs it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from hostenv.processes import stream
from testbed.errors import EnvironmentProblem
from testbed.host import progress

APT_LOCK_TIMEOUT = 600  # seconds apt-get waits for another apt/dpkg run on this machine
SKIP_ENV = "DRA_TESTBED_NO_APT"  # set: never run apt-get, report what is missing instead
RUN_LOCK = Path("/run/lock")  # the FHS place for lock files: a tmpfs, so the lock never outlives a boot


class HostDepsMissing(EnvironmentProblem):
    """Host packages a feature needs are missing and could not be installed; one line for the user."""


@dataclass(frozen=True)
class Package:
    """A Debian package and the files any of which proves it installed (absolute paths or command names)."""

    name: str
    provides: tuple[str, ...]

    def present(self) -> bool:
        return any(Path(p).exists() if p.startswith("/") else shutil.which(p, path=_search_path()) for p in self.provides)


def _search_path() -> str:
    # root's sbin dirs are not always on a user's PATH, yet dockerd and debootstrap live there
    return os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])


DOCKER = Package("docker.io", ("dockerd",))
DEBOOTSTRAP = Package("debootstrap", ("debootstrap",))
LIBSECCOMP_DEV = Package("libseccomp-dev", ("/usr/include/seccomp.h",))
PKG_CONFIG = Package("pkg-config", ("pkg-config",))
CHROMIUM = Package("chromium", ("chromium", "chromium-browser"))
BUSYBOX = Package("busybox-static", ("/bin/busybox",))
IPTABLES = Package("iptables", ("iptables",))
IPROUTE2 = Package("iproute2", ("ip",))

FEATURES: dict[str, tuple[str, tuple[Package, ...]]] = {
    "docker": ("the Docker engine of the kind backend", (DOCKER,)),
    "debootstrap": ("Debian root file systems (node images, `nox -s fresh`)", (DEBOOTSTRAP,)),
    "runc": ("building runc with seccomp for the kind node image", (LIBSECCOMP_DEV, PKG_CONFIG)),
    "kind": ("the kind backend (Docker engine, offline node image)", (DOCKER, DEBOOTSTRAP, LIBSECCOMP_DEV, PKG_CONFIG)),
    "html": ("rendering HTML reports in headless Chromium", (CHROMIUM,)),
    "busybox": ("the busybox of the upstream DRA e2e images", (BUSYBOX,)),
    # the fresh machine's own network namespace is NATed out with ip and iptables (testbed/host/netns.py)
    "fresh": ("the fresh-machine run (`nox -s fresh`)", (DEBOOTSTRAP, IPTABLES, IPROUTE2)),
}


def _packages(features: tuple[str, ...]) -> list[Package]:
    wanted: list[Package] = []
    for feature in features:
        if feature not in FEATURES:
            raise ValueError(f"unknown host feature {feature!r}; valid: {', '.join(FEATURES)}")
        wanted += [p for p in FEATURES[feature][1] if p not in wanted]
    return wanted


def missing(*features: str) -> list[Package]:
    """Packages of `features` that are not installed."""
    return [p for p in _packages(features) if not p.present()]


def _what(features: tuple[str, ...]) -> str:
    return "; ".join(FEATURES[f][0] for f in features)


def _advice(features: tuple[str, ...], absent: list[Package]) -> str:
    names = " ".join(p.name for p in absent)
    return (f"{_what(features)} needs Debian package(s) {', '.join(p.name for p in absent)}: "
            f"install them with `sudo apt-get install -y {names}` (or run as root, where dra-testbed installs them) and retry")


def _apt_command() -> list[str] | None:
    """How to run apt-get with root rights here, or None (not root and no password-less sudo)."""
    if os.environ.get(SKIP_ENV) or not shutil.which("apt-get"):
        return None
    if os.geteuid() == 0:
        return ["apt-get"]
    if shutil.which("sudo") and subprocess.run(["sudo", "-n", "true"], capture_output=True).returncode == 0:
        return ["sudo", "-n", "apt-get"]
    return None


def _lock_path() -> Path:
    # machine-wide (not per user cache): apt's own lock is machine-wide too
    folder = RUN_LOCK if RUN_LOCK.is_dir() and os.access(RUN_LOCK, os.W_OK) else Path(tempfile.gettempdir())
    return folder / "dra-testbed-apt.lock"


def _run_apt(apt: list[str], args: list[str], step: progress.Step, log: Path) -> tuple[int, str]:
    """One apt-get run; its progress lines are shown as they come and kept in `log`. Returns (code, last error)."""
    env = dict(os.environ, DEBIAN_FRONTEND="noninteractive", NEEDRESTART_MODE="a")
    command = [*apt, "-o", f"DPkg::Lock::Timeout={APT_LOCK_TIMEOUT}", *args]
    last_error = ""
    with log.open("a") as sink:
        sink.write(f"$ {' '.join(command)}\n")

        def take(line: str) -> None:
            nonlocal last_error
            sink.write(line)
            text = line.strip()
            if text.startswith(("E:", "Err:")):
                last_error = text
            if text.startswith(("Get:", "Fetched", "Unpacking", "Setting up", "E:", "Err:")):
                progress.note(f"[dim]  apt: {text[:110]}[/dim]")
                step.update(text[:70])

        return stream(command, take, env=env), last_error


def ensure(*features: str) -> None:
    """Install the Debian packages `features` need that are missing; HostDepsMissing (one line) if impossible."""
    absent = missing(*features)
    if not absent:
        return
    apt = _apt_command()
    if apt is None:
        raise HostDepsMissing(_advice(features, absent))
    with FileLock(str(_lock_path())):
        absent = missing(*features)  # someone else may have installed them while we waited
        if not absent:
            return
        names = [p.name for p in absent]
        log = Path(tempfile.gettempdir()) / "dra-testbed-apt.log"
        with progress.step(f"installing {', '.join(names)} with apt-get for {_what(features)} (log: {log})") as step:
            code, error = _run_apt(apt, ["update"], step, log)
            if code != 0:
                raise HostDepsMissing(f"`apt-get update` failed ({error or f'exit {code}'}; log: {log}); "
                                      + _advice(features, absent))
            code, error = _run_apt(apt, ["install", "-y", *names], step, log)
            if code != 0:
                raise HostDepsMissing(f"`apt-get install {' '.join(names)}` failed ({error or f'exit {code}'}; log: {log})")
    still = missing(*features)
    if still:
        raise HostDepsMissing(f"apt-get installed {', '.join(names)} but {', '.join(p.provides[0] for p in still)} "
                              f"is still missing; {_advice(features, still)}")



def prefetch(*features: str) -> None:
    """Install what `features` may need in one apt-get run when this host can; never fails for lack of
    rights (each part's own `ensure` reports then, and only if that part is really needed)."""
    if missing(*features) and _apt_command() is not None:
        ensure(*features)
