"""Processes the test bed starts and must stop: is one alive, and end it (politely first)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator

AFTER_STOP_READ = 5.0  # seconds read_stopped reads a stopped group's last output
HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
CHILD_CLEANUP = 180.0  # seconds run_child waits for an interrupted child's own cleanup (a bed's teardown takes 5-30)


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
    proc = None
    try:
        with interrupts_held():  # an interrupt right after the start must find `proc` set: the group is stopped
            proc = subprocess.Popen(args, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                    stdin=subprocess.DEVNULL, text=True, start_new_session=True)
        out, err = proc.communicate(timeout=timeout)
    except BaseException:
        if proc is not None:
            stop_group(proc.pid)
            read_stopped(proc)
        raise
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


@contextlib.contextmanager
def interrupts_held() -> Iterator[None]:
    """SIGINT, SIGTERM and SIGHUP that arrive during the block are held and delivered right after it, to
    whatever handler was in place (Ctrl-C's KeyboardInterrupt, testbed.host.interrupts', the default).

    For "start a process and record it" (its pid file, the variable a `finally` stops it by): an exception
    raised between the two would leave the process running where no cleanup looks. The Python-level handlers
    are swapped for the block's length rather than the signals blocked: a blocked mask is inherited across
    fork and exec, and the process started would begin with these signals blocked. Off the main thread the
    block runs as is: Python runs signal handlers, and so raises their exceptions, in the main thread only."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    arrived: list[int] = []
    previous: dict[int, Any] = {}
    for signum in HELD_SIGNALS:
        handler = signal.getsignal(signum)
        if handler in (signal.SIG_IGN, None):  # ignored on purpose (nohup), or set outside Python: left as it is
            continue
        previous[signum] = signal.signal(signum, lambda received, _frame: arrived.append(received))
    try:
        yield
    finally:
        for signum, handler in previous.items():
            signal.signal(signum, handler)
        for signum in dict.fromkeys(arrived):  # once each, in the order they came: a repeat adds nothing
            signal.raise_signal(signum)


def run_child(args: list[str], *, capture_output: bool = False, text: bool = False, input: str | bytes | None = None,
              timeout: float | None = None, check: bool = False, cleanup: float = CHILD_CLEANUP,
              **popen: Any) -> subprocess.CompletedProcess:
    """subprocess.run for a child that owns something it must clean up itself (`dra-testbed` bringing up a
    bed, a pytest run with bed fixtures).

    subprocess.run, interrupted, waits 0.25 s and SIGKILLs the child, which got the same Ctrl-C from the
    terminal and is in the middle of its teardown: the clusters and publishers it started (in sessions of
    their own) stay. Here an interrupt (KeyboardInterrupt, testbed.host.interrupts' Terminated, SystemExit)
    waits up to `cleanup` seconds for the child to exit, reading its output meanwhile, then re-raises. A
    SIGTERM or SIGHUP (Terminated carries its number) is passed on to the child, which a runner's `kill` or
    `timeout` may not have reached; a Ctrl-C reaches the terminal's whole process group, the child included,
    and is not sent twice. A timeout interrupts the child as Ctrl-C would (SIGINT) and waits the same way.
    A child still running after `cleanup` seconds is killed, and the message says so."""
    if capture_output:
        popen.update(stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    if input is not None:
        popen["stdin"] = subprocess.PIPE
    proc = None
    try:
        with interrupts_held():
            proc = subprocess.Popen(args, text=text, **popen)
        out, err = proc.communicate(input, timeout=timeout)
    except subprocess.TimeoutExpired:
        if proc is not None:
            _let_it_clean_up(proc, signal.SIGINT, cleanup)
        raise
    except (KeyboardInterrupt, SystemExit) as exc:
        if proc is not None:
            _let_it_clean_up(proc, getattr(exc, "signum", None), cleanup)
        raise
    except BaseException:
        if proc is not None:  # our own failure (a pipe error): as subprocess.run does
            proc.kill()
            proc.wait()
        raise
    if check and proc.returncode:
        raise subprocess.CalledProcessError(proc.returncode, args, out, err)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def _let_it_clean_up(proc: subprocess.Popen, forward: int | None, limit: float) -> None:
    """Wait up to `limit` seconds for an interrupted `proc` to finish its cleanup and exit (sent `forward` first
    when given), then kill it if it has not. A further interrupt while waiting (where no handler notes it, as
    testbed.host.interrupts' does) stops the wait, not the child: it goes on with its cleanup."""
    if forward is not None and proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            proc.send_signal(forward)
    try:
        proc.communicate(timeout=limit)  # its output still read: a full pipe must not stall its teardown
    except subprocess.TimeoutExpired:
        print(f"{_named(proc)} (pid {proc.pid}) had not finished its cleanup {limit:.0f}s after the "
              "interrupt: killed; what it started may still run", file=sys.stderr, flush=True)
        proc.kill()
        proc.wait()
    except KeyboardInterrupt:
        print(f"no longer waiting for {_named(proc)} (pid {proc.pid}); it goes on with its cleanup",
              file=sys.stderr, flush=True)


def _named(proc: subprocess.Popen) -> str:
    """The start of `proc`'s command line, enough to tell which child a message is about (`python -m testbed.cli up`)."""
    words = [proc.args] if isinstance(proc.args, (str, bytes)) else list(proc.args)
    return " ".join([Path(str(words[0])).name, *map(str, words[1:4])])
