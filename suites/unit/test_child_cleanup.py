"""An interrupted parent waits for its bed-owning child's own cleanup (hostenv.processes.run_child).

Ctrl-C reaches the terminal's whole process group: pytest and the `dra-testbed` it runs both get it. With
subprocess.run the parent SIGKILLed the child 0.25 s later, in the middle of its teardown, and the bed it had
started stayed (issue 40). Each case runs a real parent and child: the child takes CLEANUP_SECONDS to clean up
after the signal and writes a file when done; the parent reports whether that file was there when its own
interrupt went on.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from suites.robustness.interrupt_helpers import default_signals

REPO = Path(__file__).resolve().parents[2]
CLEANUP_SECONDS = 1.5  # well past subprocess.run's 0.25 s

# argv: folder. Cleans up on SIGINT or SIGTERM as `dra-testbed` does (a repeat is noted, not obeyed); with
# "stubborn" in argv it ignores both, as a hung teardown would.
CHILD = """
import signal, sys, time
from pathlib import Path
folder = Path(sys.argv[1])
asked = []
def note(signum, frame):
    asked.append(signum)
for signum in (signal.SIGINT, signal.SIGTERM):
    signal.signal(signum, signal.SIG_IGN if "stubborn" in sys.argv else note)
(folder / "ready").write_text("")
while not asked:
    time.sleep(0.01)
print("cleaning up", flush=True)
time.sleep(CLEANUP)
(folder / "cleaned").write_text(signal.Signals(asked[0]).name)
sys.exit(128 + asked[0])
""".replace("CLEANUP", str(CLEANUP_SECONDS))

# argv: folder, extra child argument, cleanup limit. Prints what it found once the interrupt reached it.
PARENT = """
import sys
from pathlib import Path
from hostenv.processes import run_child
from testbed.host import interrupts
folder = Path(sys.argv[1])
interrupts.install()
try:
    run_child([sys.executable, "-c", CHILD, str(folder), sys.argv[2]], capture_output=True, text=True, cleanup=float(sys.argv[3]))
    print("child ended without an interrupt")
except KeyboardInterrupt as exc:
    print(type(exc).__name__, "child cleaned:", (folder / "cleaned").read_text() if (folder / "cleaned").exists() else "no")
"""


def _parent(tmp_path: Path, child_arg: str = "-", cleanup: float = 60.0) -> subprocess.Popen:
    """The parent in a process group of its own (as a shell starts a foreground job), once its child is ready."""
    script = f"CHILD = {CHILD!r}\n" + textwrap.dedent(PARENT)
    proc = subprocess.Popen([sys.executable, "-c", script, str(tmp_path), child_arg, str(cleanup)], cwd=REPO,
                            env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True, preexec_fn=default_signals)
    deadline = time.monotonic() + 60
    while not (tmp_path / "ready").exists():
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
        time.sleep(0.02)
    return proc


def _child_pids(marker: Path) -> list[int]:
    from suites.processes import mentioning

    return [pid for pid in mentioning(str(marker)) if pid != os.getpid()]


def _finish(proc: subprocess.Popen, tmp_path: Path) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=60)
    finally:
        for pid in _child_pids(tmp_path):  # only when the check failed: nothing of the run may stay
            os.kill(pid, signal.SIGKILL)


def test_ctrl_c_to_the_group_waits_for_the_childs_cleanup(tmp_path: Path) -> None:
    parent = _parent(tmp_path)
    os.killpg(parent.pid, signal.SIGINT)  # the terminal's Ctrl-C: parent and child alike
    out, err = _finish(parent, tmp_path)
    assert out.splitlines() == ["KeyboardInterrupt child cleaned: SIGINT"], out + err
    assert _child_pids(tmp_path) == []


def test_sigterm_to_the_parent_alone_is_passed_on_and_waited_for(tmp_path: Path) -> None:
    # a runner's `kill` or `timeout` signals the parent only: the child learns of it from the parent
    parent = _parent(tmp_path)
    parent.send_signal(signal.SIGTERM)
    out, err = _finish(parent, tmp_path)
    assert out.splitlines() == ["Terminated child cleaned: SIGTERM"], out + err


def test_a_child_that_does_not_finish_is_killed_after_the_limit_and_the_message_says_so(tmp_path: Path) -> None:
    parent = _parent(tmp_path, "stubborn", cleanup=1.0)
    started = time.monotonic()
    os.killpg(parent.pid, signal.SIGINT)
    out, err = _finish(parent, tmp_path)
    assert out.splitlines() == ["KeyboardInterrupt child cleaned: no"], out + err
    assert time.monotonic() - started < 30
    assert "had not finished its cleanup 1s after the interrupt: killed" in err, err
    assert _child_pids(tmp_path) == []


def test_a_timeout_interrupts_the_child_and_waits_for_its_cleanup(tmp_path: Path) -> None:
    from hostenv.processes import run_child

    with pytest.raises(subprocess.TimeoutExpired):
        run_child([sys.executable, "-c", CHILD, str(tmp_path), "-"], capture_output=True, text=True, timeout=3)
    assert (tmp_path / "cleaned").read_text() == "SIGINT"
    assert _child_pids(tmp_path) == []


def test_output_and_exit_code_as_subprocess_run_gives_them() -> None:
    from hostenv.processes import run_child

    done = run_child([sys.executable, "-c", "import sys; print(sys.stdin.read().upper()); sys.exit(3)"], input="bed",
                     capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (3, "BED\n", "")
    with pytest.raises(subprocess.CalledProcessError):
        run_child([sys.executable, "-c", "raise SystemExit(1)"], check=True, capture_output=True)
