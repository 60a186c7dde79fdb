"""A process is recorded before an interrupt can stop the code that started it (hostenv.processes.interrupts_held).

A Ctrl-C that landed between a process's start and its pid file (the publisher, the stand-in kubelet) or the
`try` that stops it (run_group: kwokctl creating a cluster) left it running where no cleanup looks (issue 40).
Each case runs a real process with testbed.host.interrupts' handlers installed, makes the signal land right
after subprocess.Popen has returned (os.kill to ourselves runs the handler before os.kill returns), and checks
that the process was recorded, or stopped, before the interrupt went on.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

import pytest

from hostenv.processes import alive, terminate
from suites.processes import mentioning
from suites.robustness.interrupt_helpers import default_signals

REPO = Path(__file__).resolve().parents[2]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

# Lands SIGNAME right after each Popen of the code under test returns; prints the pid it started, then what
# the interrupt was. START is the code under test; HOME its folder.
LANDING = """
import json, os, signal, subprocess, sys
from pathlib import Path
from testbed.host import interrupts
HOME = Path(sys.argv[1])
real_popen = subprocess.Popen
class LandingPopen(real_popen):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        print(json.dumps({"started": self.pid}), flush=True)
        os.kill(os.getpid(), signal.SIGNAME)
subprocess.Popen = LandingPopen
interrupts.install()
try:
    START
    print(json.dumps({"went on": True}), flush=True)
except KeyboardInterrupt as exc:
    print(json.dumps({"interrupted": type(exc).__name__}), flush=True)
"""

STARTS = {
    "the publisher": ("from fake_gpus.machine.launch import spawn_publisher\n"
                      "spawn_publisher(HOME, HOME / 'kubeconfig')", "publisher.pid"),
    "the stand-in kubelet": ("from testbed.kubelet.process import start\n"
                             "start(HOME, HOME / 'kubeconfig', 'gpu.nvidia.com', {'n1': HOME / 'registry'})",
                             "standin-kubelet.pid"),
    "an on-demand plugin": ("from testbed.kubelet.process import OnDemand\n"
                            "OnDemand([sys.executable, '-c', 'import time; time.sleep(120)', str(HOME)], str(HOME / 'plugin.log'))"
                            ".start(HOME / 'n1.pid')", "n1.pid"),
}


def _land(start: str, home: Path, signum: int) -> list[dict]:
    script = textwrap.dedent(LANDING).replace("SIGNAME", signal.Signals(signum).name).replace("START", start.replace("\n", "\n    "))
    out = subprocess.run([sys.executable, "-c", script, str(home)], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=default_signals)
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert lines, out.stderr[-2000:]
    return lines


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("what", sorted(STARTS))
def test_a_signal_right_after_the_start_finds_the_pid_recorded(what: str, signum: int, tmp_path: Path) -> None:
    start, pid_file = STARTS[what]
    lines = _land(start, tmp_path, signum)
    started = lines[0]["started"]
    try:
        expected = "KeyboardInterrupt" if signum == signal.SIGINT else "Terminated"
        assert lines[1:] == [{"interrupted": expected}]  # still interrupted, once, right after the pid file
        assert int((tmp_path / pid_file).read_text()) == started
    finally:
        terminate(started)  # what `down` does with the pid file; the process may have ended already on its own


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_a_signal_right_after_run_group_starts_stops_the_group(signum: int, tmp_path: Path) -> None:
    marker = f"{3000 + uuid.uuid4().int % 1000}.25"  # the group's sleep, to find it
    start = f"from hostenv.processes import run_group\nrun_group(['sh', '-c', 'sleep {marker} & wait'])"
    lines = _land(start, tmp_path, signum)
    left = [pid for pid in mentioning(f"sleep\0{marker}") if alive(pid)]
    for pid in left:
        os.kill(pid, signal.SIGKILL)
    assert lines[1:] == [{"interrupted": "KeyboardInterrupt" if signum == signal.SIGINT else "Terminated"}]
    assert left == [], "the group run_group started outlived the interrupt"


def test_a_held_signal_is_delivered_once_after_the_block_to_the_handler_in_place() -> None:
    """Without testbed's handlers too (fake_gpus' own processes): Python's KeyboardInterrupt, right after the block."""
    script = textwrap.dedent("""
        import os, signal
        from hostenv.processes import interrupts_held
        done = []
        try:
            with interrupts_held():
                os.kill(os.getpid(), signal.SIGINT)
                os.kill(os.getpid(), signal.SIGINT)
                done.append("block")
            done.append("after")
        except KeyboardInterrupt:
            done.append("interrupted")
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
        print(done)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=default_signals)
    assert out.stdout.strip() == "['block', 'interrupted']", out.stdout + out.stderr
