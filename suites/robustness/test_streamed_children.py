"""Long builds (go, debootstrap, apt) run through processes.stream: an interruption on our side stops
the child and everything it started, so no compiler or dpkg keeps running after a Ctrl-C or SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest

from hostenv.mounts import unmount_below
from hostenv.processes import alive, stream
from testbed.host.interrupts import Terminated

# the child starts a grandchild (as go starts its compilers), reports both pids, then waits on it
SCRIPT = "sleep 300 & echo child $$ grandchild $!; wait"


def test_interrupt_while_streaming_stops_child_and_grandchildren() -> None:
    seen: list[int] = []

    def take(line: str) -> None:
        seen.extend(int(word) for word in line.split() if word.isdigit())
        raise KeyboardInterrupt  # what SIGINT/SIGTERM raise in the main thread (testbed.host.interrupts)

    with pytest.raises(KeyboardInterrupt):
        stream(["sh", "-c", SCRIPT], take)
    assert len(seen) == 2
    deadline = time.monotonic() + 10
    while any(alive(pid) for pid in seen) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert [pid for pid in seen if alive(pid)] == []


HANG = 120.0  # seconds after which a stream the test runs counts as hung: only against a hang, never a speed goal


def _interrupted(args: list[str], take, grace: float, hung: str) -> BaseException:
    """What stream(args, take, grace=grace) raised, run in a thread; the test fails, saying `hung`, when the
    stream is still running after HANG seconds."""
    raised: list[BaseException] = []

    def run() -> None:
        try:
            stream(args, take, grace=grace)
        except BaseException as exc:  # noqa: BLE001 - handed to the test
            raised.append(exc)

    worker = threading.Thread(target=run, name="stream", daemon=True)
    worker.start()
    worker.join(HANG)
    if worker.is_alive():
        pytest.fail(f"stream still running after {HANG:.0f} s: {hung}")
    assert len(raised) == 1, "stream returned though take() raised"
    return raised[0]


# a runner that cleans up on a signal (as Ginkgo does): reports its pid, and on SIGTERM prints and exits 7
TRAPPING = "trap 'echo cleaned up after TERM; exit 7' TERM; echo runner $$; while :; do sleep 0.1; done"


def test_grace_forwards_the_signal_and_keeps_the_output_of_the_clean_up() -> None:
    lines: list[str] = []

    def take(line: str) -> None:
        lines.append(line.strip())
        if line.startswith("runner"):
            raise Terminated(signal.SIGTERM)  # what a SIGTERM to us raises (testbed.host.interrupts)

    # a grace longer than HANG: a stream that waits out the grace, not the runner's end, is a hang here
    raised = _interrupted(["sh", "-c", TRAPPING], take, grace=10 * HANG,
                          hung="it waits out the grace, not the runner's end on the forwarded SIGTERM")
    assert isinstance(raised, Terminated), raised
    assert "cleaned up after TERM" in lines  # it got SIGTERM, not SIGKILL, and its last words were read
    runner = int(lines[0].split()[1])
    assert not alive(runner)


def test_grace_ends_with_stopping_a_group_that_ignores_the_signal() -> None:
    pids: list[int] = []

    def take(line: str) -> None:
        pids.append(int(line.split()[1]))
        raise KeyboardInterrupt

    try:
        raised = _interrupted(["sh", "-c", "trap '' INT; echo runner $$; while :; do sleep 0.1; done"], take, grace=1.0,
                              hung="a 1 s grace for a group that ignores SIGINT never ended")
        assert isinstance(raised, KeyboardInterrupt), raised
        assert not alive(pids[0])
    finally:
        if pids and alive(pids[0]):  # the runner is its group's leader: a failed run leaves no loop behind
            os.killpg(pids[0], signal.SIGKILL)


def test_stream_returns_the_exit_code_and_every_line() -> None:
    lines: list[str] = []
    assert stream(["sh", "-c", "echo one; echo two >&2; exit 3"], lines.append) == 3
    assert [line.strip() for line in lines] == ["one", "two"]


@pytest.mark.skipif(os.geteuid() != 0, reason="mounting needs root")
def test_unmount_below_leaves_nothing_mounted_under_a_root(tmp_path: Path) -> None:
    import subprocess

    root = tmp_path / "root"
    for sub in ("proc", "inner/tmp"):
        (root / sub).mkdir(parents=True)
    subprocess.run(["mount", "-t", "proc", "proc", str(root / "proc")], check=True)
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "inner")], check=True)
    (root / "inner" / "tmp").mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(root / "inner" / "tmp")], check=True)
    unmount_below(root)
    mounted = [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    assert [m for m in mounted if m.startswith(str(root))] == []
