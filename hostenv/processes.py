"""Processes the test bed starts and must stop: is one alive, and end it (politely first)."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Callable

AFTER_STOP_READ = 5.0  # seconds read_stopped reads a stopped group's last output


def alive(pid: int) -> bool:
    """Whether a process of that pid runs: not gone, and not a zombie (ours are reaped here; another's may
    wait for a parent that never collects it, and must not make a wait for its end last for ever)."""
    try:
        if os.waitpid(pid, os.WNOHANG)[0] == pid:  # our own child that exited: collect it
            return False
    except ChildProcessError:
        pass
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return not _zombie(pid)


def stat_fields(pid: int | str) -> list[str] | None:
    """/proc/<pid>/stat's fields after the command name (state, ppid, pgrp, ...), None when it cannot be read
    (the command name may hold spaces and parentheses: the fields start after its last ')')."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None


def _zombie(pid: int) -> bool:
    fields = stat_fields(pid)
    return bool(fields) and fields[0] in ("Z", "X")


def terminate(pid: int, grace: float = 5.0, killed_wait: float = 30.0) -> None:
    """SIGTERM, then SIGKILL after `grace` seconds, a process that is still alive; then wait up to `killed_wait`
    seconds for the kernel to finish it (one in uninterruptible sleep, on a hung mount, may take longer)."""
    if not alive(pid):
        return
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        if not alive(pid):
            return
        time.sleep(0.05)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + killed_wait
    while alive(pid) and time.monotonic() < deadline:  # SIGKILL cannot be ignored; the kernel finishes it
        time.sleep(0.02)


def group_members(pgid: int) -> list[int]:
    """Live (not zombie) processes of process group `pgid`, from /proc."""
    members = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        fields = stat_fields(stat.parent.name)
        if fields and len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":  # state, ppid, pgrp
            members.append(int(stat.parent.name))
    return members


def stop_group(pgid: int, grace: float = 5.0) -> None:
    """SIGTERM a whole process group, SIGKILL what is left of it after `grace` seconds."""
    for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            alive(pgid)  # reaps the leader when it is our child
            if not group_members(pgid):
                return
            time.sleep(0.05)


def stream(args: list[str], on_line: Callable[[str], None], *, cwd: str | os.PathLike | None = None,
           env: dict[str, str] | None = None, grace: float = 0.0) -> int:
    """Run `args` in a process group of its own, handing each line of its output to `on_line`; returns the
    exit code. Any exception on our side (Ctrl-C, SIGTERM, a failing `on_line`) stops the whole group,
    grandchildren included (go's compilers, debootstrap's dpkg), before it propagates.

    With `grace` > 0 an interruption is first forwarded: the group gets the signal we got (SIGINT for
    Ctrl-C, the `signum` of an exception that carries one) and up to `grace` seconds to finish, its output
    still handed to `on_line`, before the group is stopped. A runner such as Ginkgo uses them to run its
    clean-ups and write its reports."""
    proc = subprocess.Popen(args, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, text=True, errors="replace", start_new_session=True)
    assert proc.stdout is not None
    try:
        for line in proc.stdout:
            on_line(line)
        return proc.wait()
    except BaseException as exc:
        try:
            if grace > 0 and isinstance(exc, KeyboardInterrupt):
                _wind_down(proc, on_line, getattr(exc, "signum", signal.SIGINT), grace)
        finally:
            stop_group(proc.pid)
        raise
    finally:
        proc.stdout.close()


def _wind_down(proc: subprocess.Popen, on_line: Callable[[str], None], signum: int, grace: float) -> None:
    """Send `signum` to `proc`'s group, keep reading its output, wait up to `grace` seconds for it to exit."""
    try:
        os.killpg(proc.pid, signum)
    except ProcessLookupError:
        return

    def drain() -> None:
        try:
            for line in proc.stdout:
                on_line(line)
        except (OSError, ValueError):  # the pipe closed under us: the group is being stopped
            pass

    reader = threading.Thread(target=drain, name="wind-down-output", daemon=True)
    reader.start()
    try:
        proc.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        pass
    reader.join(timeout=2.0)


def started_from(folder: str) -> list[int]:
    """Processes whose program lies under `folder` (argv[0]): components a killed launcher started but
    never recorded, found by where their binaries were copied. Never a shell that merely names the folder."""
    prefix = folder.rstrip("/") + "/"
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            program = cmdline.read_bytes().split(b"\0", 1)[0].decode(errors="replace")
        except OSError:
            continue
        if program.startswith(prefix):
            found.append(int(cmdline.parent.name))
    return found


def read_stopped(proc: subprocess.Popen) -> None:
    """Read what `proc`'s stopped group wrote last to its pipes, for up to AFTER_STOP_READ seconds, then close
    them: a process that left the group (setsid) keeps them open for as long as it lives, maybe for ever."""
    try:
        proc.communicate(timeout=AFTER_STOP_READ)
    except subprocess.TimeoutExpired:
        for pipe in (proc.stdin, proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def run_group(args: list[str], *, env: dict[str, str] | None = None, timeout: float | None = None,
              cwd: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """subprocess.run with captured text output, in a process group of its own that is stopped whole
    on timeout or any exception (a launcher's helpers, such as kwokctl's kubectl probes, go with it)."""
    proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        stop_group(proc.pid)
        read_stopped(proc)
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)
