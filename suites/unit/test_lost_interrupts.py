"""A signal whose exception CPython swallows (it landed while a finalizer ran) still stops the run.

Seen as a hang of the interrupt test under load: the SIGTERM that should have ended a pytest session in its
bed's setup landed in a finalizer (urllib3's pool finalizer runs each time an API client goes), was printed
as "Exception ignored in ..." and lost; the session went on, and the handler ignored every later signal as
if a cleanup were under way. Each case runs a real process with the handlers installed and makes the
signal land where it would be swallowed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

HEADER = "import os, signal, sys, time\nfrom testbed import interrupts\n"

LANDINGS = {
    # in a __del__ (a weakref callback or a generator being collected swallows it the same way); os.kill to
    # ourselves runs the handler before os.kill returns, so inside the finalizer
    "in-a-finalizer": textwrap.dedent("""
        class Finalized:
            def __del__(self):
                os.kill(os.getpid(), signal.SIGNAME)
        interrupts.install()
    """),
    # in sys.unraisablehook itself, as it reports another finalizer's error: an exception raised there is
    # swallowed without even reaching the hook
    "in-the-unraisable-hook": textwrap.dedent("""
        class Finalized:
            def __del__(self):
                raise ValueError("a finalizer's own error")
        def report(unraisable):
            os.kill(os.getpid(), signal.SIGNAME)
        sys.unraisablehook = report
        interrupts.install()
    """),
}

RUN = textwrap.dedent("""
    try:
        Finalized()  # dropped at once: its finalizer runs here
        for _ in range(200):
            time.sleep(0.05)  # the work the signal should have stopped
        print("went on to the end")
    except KeyboardInterrupt as exc:
        print("interrupted:", type(exc).__name__)
        sys.exit(interrupts.exit_code())
    finally:
        print("cleaned up")
""")


@pytest.mark.parametrize("signum", (signal.SIGINT, signal.SIGTERM, signal.SIGHUP), ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("where", sorted(LANDINGS))
def test_a_swallowed_interruption_is_raised_again(where: str, signum: int) -> None:
    script = HEADER + LANDINGS[where].replace("SIGNAME", signal.Signals(signum).name) + RUN
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, cwd=REPO,
                         env=dict(os.environ, PYTHONPATH=str(REPO)))
    expected = "KeyboardInterrupt" if signum == signal.SIGINT else "Terminated"
    assert out.stdout.splitlines() == [f"interrupted: {expected}", "cleaned up"], out.stdout + out.stderr[-1500:]
    assert out.returncode == 128 + signum


SESSION_TEST = textwrap.dedent("""
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
""")


def test_a_swallowed_sigterm_in_a_session_fixture_ends_the_session(tmp_path: Path) -> None:
    """In pytest, whose own sys.unraisablehook turns the swallowed exception into a warning."""
    (tmp_path / "test_swallowed.py").write_text(SESSION_TEST)
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "testbed.pytest_plugin", "-p", "no:cacheprovider",
                          "--rootdir", str(tmp_path), str(tmp_path / "test_swallowed.py")],
                         capture_output=True, text=True, timeout=120, cwd=REPO, env=dict(os.environ, PYTHONPATH=str(REPO)))
    assert not (tmp_path / "in-test").exists(), out.stdout[-1500:]
    assert out.returncode == pytest.ExitCode.INTERRUPTED, out.stdout[-1500:] + out.stderr[-1500:]
