"""The waits of a cleanup end: a zombie that its parent never collects counts as gone, and run_group, stopped,
does not wait for a process that left its group but still holds its output pipes."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
import uuid
from pathlib import Path

from hostenv.processes import alive, run_group, terminate


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


def test_a_zombie_nobody_collects_is_not_alive_and_terminating_it_returns() -> None:
    # the child exits at once; its parent (exec'd into sleep) never waits for it, so it stays a zombie
    parent = subprocess.Popen(["sh", "-c", "sleep 0 & echo $!; exec sleep 300"], stdout=subprocess.PIPE, text=True)
    try:
        zombie = int(parent.stdout.readline())
        deadline = time.monotonic() + 30
        while _state(zombie) != "Z" and time.monotonic() < deadline:
            time.sleep(0.05)
        assert _state(zombie) == "Z"
        assert not alive(zombie)
        terminate(zombie)  # returned at once: it was waited for as if it might still end
        assert _state(zombie) == "Z"  # a zombie is not ours to collect
    finally:
        parent.kill()
        parent.wait()


def _escaped(marker: str) -> list[int]:
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if cmdline.read_bytes().split(b"\0")[:2] == [b"sleep", marker.encode()]:
                found.append(int(cmdline.parent.name))
        except OSError:
            continue
    return found


def test_a_stopped_run_group_returns_though_a_process_that_left_the_group_holds_its_output() -> None:
    marker = f"{3000 + uuid.uuid4().int % 1000}.5"  # the escaped process's own argument, to find and stop it
    raised: list[BaseException] = []

    def run() -> None:
        try:
            run_group(["sh", "-c", f"setsid sleep {marker} & sleep 300"], timeout=1)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    try:
        worker.join(120)
        assert not worker.is_alive(), "run_group still reads the pipe that the process which left its group holds"
        assert [type(exc) for exc in raised] == [subprocess.TimeoutExpired]
    finally:
        for pid in _escaped(marker):
            os.kill(pid, signal.SIGKILL)
        worker.join(30)
