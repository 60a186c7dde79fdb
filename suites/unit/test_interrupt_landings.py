"""A signal that lands where an exception must not be raised is put off, not lost and not harmful.

Two failures seen under load: a SIGTERM landing in a finalizer (urllib3's pool finalizer runs each time
an API client goes) was swallowed by CPython ("Exception ignored in ...") and the pytest session went on
for 600 s; a SIGHUP raised inside importlib's bookkeeping, while the publisher's preload thread imported,
left an import lock held and the CLI hung in its cleanup. Each case runs a real process with the handlers
installed and makes the signal land in such a place; importlib's own code, where no signal can be made to
land on purpose, is checked by classifying its frame (benchmarks/signal_during_imports.py lands signals
there by chance, hundreds of times).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from suites.robustness.interrupt_helpers import default_signals
from testbed.host import interrupts

REPO = Path(__file__).resolve().parents[2]
SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

HEADER = "import os, signal, sys, time, weakref\nfrom testbed.host import interrupts\n"

# Each landing defines `land()`, whose run puts the signal (os.kill to ourselves runs the handler before
# os.kill returns) inside the place named, and prints "landed" once that place has finished its work.
LANDINGS = {
    "a __del__": """
        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGNAME)
                print("landed")
        def land():
            Finalized()
    """,
    "a weakref.finalize callback": """
        class Pool:
            pass
        def close_pool():
            os.kill(os.getpid(), signal.SIGNAME)
            print("landed")
        def land():
            pool = Pool()
            weakref.finalize(pool, close_pool)
            del pool
    """,
    "the unraisable hook": """
        class Finalized:
            def __del__(self):
                raise ValueError("a finalizer's own error")
        def report(unraisable):
            os.kill(os.getpid(), signal.SIGNAME)
            print("landed")
        sys.unraisablehook = report
        def land():
            Finalized()
    """,
}

RUN = """
    interrupts.install()
    try:
        land()
        for _ in range(200):
            time.sleep(0.05)  # the work the signal should have stopped
        print("went on to the end")
    except KeyboardInterrupt as exc:
        print("interrupted:", type(exc).__name__)
        sys.exit(interrupts.exit_code())
    finally:
        print("cleaned up")
"""


def run_script(script: str) -> subprocess.CompletedProcess:
    # default dispositions: a runner that ignores SIGHUP (nohup) would hand that on, and the handlers rightly
    # keep an ignored signal ignored (a CI run under nohup failed the SIGHUP cases so)
    return subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                          env=dict(os.environ, PYTHONPATH=str(REPO)), preexec_fn=default_signals)


@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("where", sorted(LANDINGS))
def test_a_signal_landing_there_stops_the_run_after_that_place_is_done(where: str, signum: int) -> None:
    body = textwrap.dedent(LANDINGS[where]).replace("SIGNAME", signal.Signals(signum).name)
    out = run_script(HEADER + body + textwrap.dedent(RUN))
    expected = "KeyboardInterrupt" if signum == signal.SIGINT else "Terminated"
    # "landed" first: nothing was raised inside the finalizer or the import; then the run stops, once
    assert out.stdout.splitlines() == ["landed", f"interrupted: {expected}", "cleaned up"], out.stdout + out.stderr[-1500:]
    assert out.returncode == 128 + signum
    assert "Exception ignored" not in out.stderr, out.stderr[-1500:]


class FrameCatcher:
    """A meta path finder that keeps the frame importlib called it from, and the importing module's body frame."""

    def __init__(self) -> None:
        self.frames: dict[str, object] = {}

    def find_spec(self, name, path, target=None):  # noqa: ARG002 - the finder protocol
        if name == "catch_importlib_frame":
            self.frames["importlib"] = sys._getframe(1)
        return None


def test_importlib_bookkeeping_is_unsafe_a_module_body_is_not(tmp_path: Path, monkeypatch) -> None:
    """The deadlock's place (importlib's own code, e.g. its module-lock callback) puts a signal off; a module's
    body, which importlib runs inside its `try`s, does not, so a long import is not waited out."""
    catcher = FrameCatcher()
    (tmp_path / "body_frame.py").write_text("import sys\nFRAME = sys._getframe()\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(sys, "meta_path", [catcher, *sys.meta_path])
    with pytest.raises(ImportError):
        import catch_importlib_frame  # noqa: F401 - found by no finder; the catcher saw importlib's frame
    import body_frame

    assert catcher.frames["importlib"].f_code.co_filename.startswith("<frozen importlib")
    assert interrupts.unsafe_to_raise(catcher.frames["importlib"]) == "import"
    assert interrupts.unsafe_to_raise(body_frame.FRAME) is None
    assert interrupts.unsafe_to_raise(sys._getframe()) is None


def test_a_second_signal_while_one_is_put_off_does_not_raise_twice() -> None:
    """A runner's repeated SIGTERM arriving while the first is put off: one Terminated, one cleanup."""
    script = HEADER + textwrap.dedent("""
        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGTERM)
                os.kill(os.getpid(), signal.SIGTERM)
                print("landed")
    """) + textwrap.dedent(RUN.replace("land()", "Finalized()"))
    out = run_script(script)
    assert out.stdout.splitlines() == ["landed", "interrupted: Terminated", "cleaned up"], out.stdout + out.stderr[-1500:]
    assert out.returncode == 128 + signal.SIGTERM
    assert "Traceback" not in out.stderr, out.stderr[-1500:]


SESSION_TEST = """
    import os, signal, time
    from pathlib import Path

    import pytest

    class Finalized:
        def __del__(self):
            os.kill(os.getpid(), signal.SIGTERM)

    @pytest.fixture(scope="session")
    def bed():
        Finalized()  # the SIGTERM lands in a finalizer, as it did in the bed's setup
        for _ in range(200):
            time.sleep(0.05)  # the rest of the setup, which the SIGTERM should have cut short
        yield

    def test_body(bed):
        (Path(__file__).parent / "in-test").touch()
"""


def test_a_sigterm_in_a_finalizer_during_a_session_fixture_ends_the_session(tmp_path: Path) -> None:
    (tmp_path / "test_finalized.py").write_text(textwrap.dedent(SESSION_TEST))
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "testbed.pytest.plugin", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_finalized.py")],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)),
                         preexec_fn=default_signals)
    assert not (tmp_path / "in-test").exists(), out.stdout[-2000:]
    assert out.returncode != 0, out.stdout[-2000:]
