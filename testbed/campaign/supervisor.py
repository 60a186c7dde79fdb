"""Restart=always for a cluster's host processes: what systemd or a kubelet does for its units.

A `Unit` is adopted from its running process: the command line, working directory, environment and
log (stdout) are read from /proc, so a restart runs exactly what was running, with its pid file kept
current (the cluster's teardown stops whatever the file names). The supervisor's thread notices any
unit that exited and starts it again after `delay` seconds; `kill` SIGKILLs one on purpose. A killed
unit is back once its process runs again and its `ready` probe (if any) says it serves: its downtime
runs from the kill to then, and `outages` keeps that span for the campaign's bounds. Exits nobody
asked for are counted as crashes and reported with their last log errors (CampaignResult.crashes), for a
reader to look into; report.judge does not fail a run on them, because a component exiting while the
apiserver or etcd it needs is killed is expected. On kind the kubelets restart units and this count stays 0.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Mapping, Protocol, Sequence, runtime_checkable

from hostenv.processes import alive, stat_fields
from testbed.campaign.outages import Outages


@runtime_checkable
class SupervisedUnit(Protocol):
    """What the campaign reads of a unit on either backend: a Unit here, a KindUnit (kind.py)."""

    name: str
    kind: str
    killed_at: float | None  # set by a kill, None again once it serves
    crashes: int
    downtimes: list[float]
    exit_reasons: list[str]


@runtime_checkable
class Supervision(Protocol):
    """What the campaign asks of whoever restarts its units: the Supervisor here (KWOK), KindSupervision (kind's
    kubelets). `kill` returns the unit, its killed_at None when nothing was killed."""

    period: float  # seconds between looks at the units
    outages: Outages

    @property
    def units(self) -> Mapping[str, SupervisedUnit]: ...

    def of_kind(self, kind: str) -> Sequence[SupervisedUnit]: ...

    def kill(self, name: str) -> SupervisedUnit: ...

    def all_running(self) -> bool: ...

    def wait_running(self, timeout: float = ...) -> bool: ...


class SuperviseError(RuntimeError):
    """A unit cannot be adopted (no pid file, process gone); one line."""


def running(pid: int) -> bool:
    """Alive and not a zombie (a killed component reparented to an init that is slow to reap)."""
    if not alive(pid):
        return False
    fields = stat_fields(pid)
    return bool(fields) and fields[0] != "Z"


def start_of(pid: int) -> int | None:
    """When the process of that pid started (clock ticks after boot, /proc/<pid>/stat's 22nd field); None when
    there is none. With the pid it names one process: a pid reused by another process has another start."""
    fields = stat_fields(pid)
    try:
        return int(fields[19]) if fields else None
    except (ValueError, IndexError):
        return None


def same_process(pid: int, started: int | None) -> bool:
    """Whether `pid` still names the process whose start was `started` (None: not known, taken as yes)."""
    return started is None or start_of(pid) == started


def last_error(log: str | None, tail: int = 8192) -> str:
    """The last error line (klog E/F, or one saying error) of a log file; '' when none or no log."""
    if not log:
        return ""
    try:
        with open(log, "rb") as f:
            f.seek(max(0, os.path.getsize(log) - tail))
            lines = f.read().decode(errors="replace").splitlines()
    except OSError:
        return ""
    errors = [line for line in lines if line[:1] in ("E", "F") or "error" in line.lower()]
    return (errors or [""])[-1][:300]


@dataclass
class Unit:
    """One supervised process: `kind` is the component (plugin, publisher, scheduler, apiserver, etcd)."""

    name: str
    kind: str
    pid_file: Path
    argv: list[str]
    cwd: str
    env: dict[str, str]
    log: str | None
    pid: int
    started: int | None = None  # the process's start (start_of()) as first seen at this pid: who `kill` may kill
    restarts: int = 0
    crashes: int = 0
    external: bool = False  # restarted by someone else (a kubelet): only killed and watched here
    killed_at: float | None = None  # set by kill(), cleared once it serves again
    down_since: float | None = None
    killed_pid: int = -1
    restarted: bool = False  # a new process runs since the kill (it may not serve yet)
    proc: subprocess.Popen | None = None
    ready: Callable[[], bool] | None = None  # whether a running process serves (e.g. its /readyz answers)
    next_probe: float = 0.0
    downtimes: list[float] = field(default_factory=list)  # kill -> a new process serves, seconds
    exit_reasons: list[str] = field(default_factory=list)  # the log's last error line at each exit nobody asked for

    @classmethod
    def adopt(cls, name: str, kind: str, pid_file: Path) -> Unit:
        try:
            pid = int(pid_file.read_text().strip())
            proc_dir = Path(f"/proc/{pid}")
            argv = [a.decode() for a in (proc_dir / "cmdline").read_bytes().split(b"\0") if a]
            cwd = os.readlink(proc_dir / "cwd")
            env = dict(e.decode().split("=", 1) for e in (proc_dir / "environ").read_bytes().split(b"\0") if b"=" in e)
            out = os.readlink(proc_dir / "fd" / "1")
        except (OSError, ValueError) as exc:
            raise SuperviseError(f"cannot adopt {name} from {pid_file}: {exc}") from exc
        if not argv:
            raise SuperviseError(f"cannot adopt {name}: process {pid} has no command line (exited?)")
        return cls(name, kind, pid_file, argv, cwd, env, out if out.startswith("/") and os.path.isfile(out) else None, pid,
                   start_of(pid))

    def start(self) -> None:
        log = open(self.log, "ab") if self.log else subprocess.DEVNULL
        try:
            self.proc = subprocess.Popen(self.argv, cwd=self.cwd, env=self.env, stdin=subprocess.DEVNULL, stdout=log,
                                         stderr=subprocess.STDOUT, start_new_session=True)
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        self.pid, self.started = self.proc.pid, start_of(self.proc.pid)
        self.pid_file.write_text(f"{self.pid}\n")

    def is_running(self) -> bool:
        """Whether the unit's process runs: the one first seen at its pid, not another that got the pid since."""
        if self.external:
            try:
                pid = int(self.pid_file.read_text().strip())
            except (OSError, ValueError):
                return True  # not started (on demand): nothing to wait for
            if pid != self.pid:  # a new process of the unit: the one `kill` may kill from now on
                self.pid, self.started = pid, start_of(pid)
            return self._seen_running()
        if self.proc is not None:
            return self.proc.poll() is None
        return self._seen_running()

    def _seen_running(self) -> bool:
        """`pid` runs and is the process seen there (its start is `started`): an adopted unit that exited and whose
        pid an unrelated process got is not running, and gets restarted."""
        return running(self.pid) and same_process(self.pid, self.started)

    @classmethod
    def watched(cls, name: str, kind: str, pid_file: Path) -> Unit:
        """A unit whose process someone else starts and restarts (its pid file may not exist yet)."""
        return cls(name, kind, pid_file, [], "", {}, None, -1, external=True)


class Supervisor:
    """Watches units every `period` seconds and restarts any that exited, `delay` seconds later."""

    PROBE_EVERY = 1.0  # seconds between readiness probes of a unit coming back

    def __init__(self, units: list[Unit], delay: float = 1.0, period: float = 0.2, outages: Outages | None = None) -> None:
        self.units = {u.name: u for u in units}
        self.delay, self.period = delay, period
        self.outages = outages or Outages()
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="supervisor", daemon=True)

    def __enter__(self) -> Supervisor:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def stop(self) -> None:
        """Stop supervising (units keep running: the cluster's teardown stops them by their pid files)."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join(timeout=30)

    def of_kind(self, kind: str) -> list[Unit]:
        return [u for u in self.units.values() if u.kind == kind]

    def kill(self, name: str) -> Unit:
        """SIGKILL the unit's process; the loop restarts it. A pid that no longer names the process first seen
        there (the unit exited and another process got its pid) is not killed: the unit is gone, no kill."""
        with self.lock:
            unit = self.units[name]
            unit.is_running()  # an external unit's current pid
            if unit.external and unit.pid < 0:
                return unit  # not started yet: nothing to kill
            if not same_process(unit.pid, unit.started):
                return unit  # gone: what runs at its pid is someone else
            unit.killed_at, unit.killed_pid, unit.restarted = time.monotonic(), unit.pid, False
            self.outages.down(name, unit.killed_at)
            try:
                os.kill(unit.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            return unit

    def all_running(self) -> bool:
        with self.lock:
            return all(u.is_running() and u.killed_at is None for u in self.units.values())

    def wait_running(self, timeout: float = 120.0) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.all_running():
                return True
            time.sleep(self.period)
        return False

    def _loop(self) -> None:
        while not self._stop.wait(self.period):
            with self.lock:
                for unit in self.units.values():
                    try:
                        self._tend(unit)
                    except Exception as exc:  # noqa: BLE001 - one unit that cannot be restarted must not end every unit's supervision
                        reason = f"restart failed: {type(exc).__name__}: {exc}"[:300]
                        if unit.exit_reasons[-1:] != [reason]:
                            unit.exit_reasons.append(reason)
                        unit.down_since = time.monotonic()  # tried again `delay` seconds later

    def _back(self, unit: Unit) -> None:
        """A killed unit's new process runs: it is back once it serves (probed at most once a second)."""
        now = time.monotonic()
        if unit.ready is not None:
            if now < unit.next_probe:
                return
            unit.next_probe = now + self.PROBE_EVERY
            try:
                serving = unit.ready()
            except Exception:  # noqa: BLE001 - a probe that cannot answer: not serving yet
                serving = False
            if not serving:
                return
        unit.downtimes.append(time.monotonic() - unit.killed_at)
        self.outages.up(unit.name)
        unit.killed_at, unit.restarted = None, False

    def _tend(self, unit: Unit) -> None:
        if unit.external:
            if unit.killed_at is not None and unit.is_running() and unit.pid != unit.killed_pid:
                if not unit.restarted:
                    unit.restarts, unit.restarted = unit.restarts + 1, True
                self._back(unit)
            return
        if unit.is_running():
            unit.down_since = None
            if unit.killed_at is not None:
                self._back(unit)
            return
        now = time.monotonic()
        if unit.down_since is None:
            unit.down_since = now
            if unit.killed_at is None or unit.restarted:
                unit.crashes += 1  # nobody asked for this exit (or the restart after a kill fell over): say why
                unit.exit_reasons.append(last_error(unit.log))
        if now - unit.down_since < self.delay:
            return
        unit.start()
        unit.restarts += 1
        unit.restarted = unit.killed_at is not None
        unit.down_since = None
