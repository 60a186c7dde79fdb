"""The test-bed life cycle (testbed.beds) on a backend that starts nothing and records what it is asked:
teardown owed from before `create` starts, reuse and refusal, retries only after a start error, images, logs,
kept beds, and a signal during the teardown that waits for it (in a process of its own, as from a terminal).

A KWOK bed was seen left running (etcd, apiserver, controller-manager, scheduler, kwok-controller, publisher)
after Ctrl-C during a conformance bed's set-up: the teardown must cover every moment from before creation.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from suites.robustness.interrupt_helpers import default_signals
from suites.unit.fake_backend import FakeCluster, registered, signal_self
from testbed.beds import BedRefused, bed_session, owed
from testbed.clusters.base import ClusterError, ClusterSpec, ClusterStartError, spec_record
from testbed.clusters.layout import from_flags

REPO = Path(__file__).resolve().parents[2]
SPEC = ClusterSpec(name="bed-under-test", layout=from_flags(["n0=h100-80gb:1:whole"]))


@pytest.fixture
def fake():
    with registered() as backend:
        yield backend


def test_an_interrupt_inside_create_removes_what_had_started(fake) -> None:
    # the session's own beds (a full run's kind and property beds) are owed meanwhile too: only this bed is judged
    already = owed()
    seen_owed = []
    fake.on_create = [lambda: seen_owed.extend(b.name for b in owed()) or (_ for _ in ()).throw(KeyboardInterrupt())]
    with pytest.raises(KeyboardInterrupt):
        with bed_session(SPEC, "fake"):
            pytest.fail("the bed was handed out although create was interrupted")
    assert [name for name in seen_owed if name not in {bed.name for bed in already}] == [SPEC.name]  # owed before create ran
    assert fake.calls == ["create", "delete", "deleted"] and not fake.running
    assert owed() == already


def test_a_bed_is_handed_out_with_its_images_and_client_and_removed_afterwards(fake) -> None:
    with bed_session(SPEC, "fake", images=("workload:1",), workers_only=True) as bed:
        assert bed.cluster.name in fake.running and not bed.reused and bed.api is not None
    assert fake.calls == ["create", "load workload:1 workers", "api closed", "delete", "deleted"]


def test_a_running_bed_of_the_same_spec_is_reused_and_left_running(fake) -> None:
    fake.running[SPEC.name] = spec_record(SPEC)
    with bed_session(SPEC, "fake", reuse=True, client=None) as bed:
        assert bed.reused
    assert fake.calls == [] and SPEC.name in fake.running


def test_a_running_bed_of_another_spec_is_refused_in_one_line_and_left_alone(fake) -> None:
    fake.running[SPEC.name] = spec_record(ClusterSpec(name=SPEC.name, layout=from_flags(["n0=h100-80gb:2:whole"])))
    with pytest.raises(BedRefused) as refused:
        with bed_session(SPEC, "fake", reuse=True):
            pytest.fail("a bed of another spec was handed out")
    message = str(refused.value)
    assert "\n" not in message and "its layout differs" in message and f"dra-testbed down --backend fake --name {SPEC.name}" in message
    assert fake.calls == [] and SPEC.name in fake.running


def test_a_start_error_is_tried_again_up_to_attempts(fake) -> None:
    fake.on_create = [ClusterStartError("kube-apiserver not healthy after 180s")]
    with bed_session(SPEC, "fake", attempts=2, client=None):
        assert fake.calls == ["create", "create"]
    fake.calls.clear()
    fake.on_create = [ClusterStartError("first"), ClusterStartError("second")]
    with pytest.raises(ClusterStartError, match="second"):
        with bed_session(SPEC, "fake", attempts=2, client=None):
            pass
    assert fake.calls == ["create", "create", "delete", "deleted"]


def test_a_refusal_before_anything_started_is_not_tried_again(fake) -> None:
    fake.on_create = [ClusterError("no layout: give --layout FILE")]
    with pytest.raises(ClusterError, match="no layout"):
        with bed_session(SPEC, "fake", attempts=3, client=None):
            pass
    assert fake.calls.count("create") == 1


def test_a_kept_bed_stays_up_even_when_it_failed(fake) -> None:
    with pytest.raises(RuntimeError):
        with bed_session(SPEC, "fake", keep=True, client=None):
            raise RuntimeError("a test failed")
    assert fake.calls == ["create"] and SPEC.name in fake.running


def test_logs_are_exported_on_failure_and_not_after_an_interrupt(fake, tmp_path: Path) -> None:
    with bed_session(SPEC, "fake", on_failure_logs=tmp_path, client=None):
        pass
    assert fake.calls == ["create", "delete", "deleted"]  # no failure: no logs
    for ending in (RuntimeError("a check failed"), None):
        fake.calls.clear()
        with pytest.raises(RuntimeError) if ending else _nothing():
            with bed_session(SPEC, "fake", on_failure_logs=tmp_path, client=None) as bed:
                if ending:
                    raise ending
                bed.failed = True  # what ran on it failed without raising (a pytest session's failed tests)
        assert fake.calls == ["create", f"logs {tmp_path}", "delete", "deleted"]
    fake.calls.clear()
    with pytest.raises(KeyboardInterrupt):
        with bed_session(SPEC, "fake", on_failure_logs=tmp_path, logs_to=tmp_path, client=None):
            raise KeyboardInterrupt
    assert fake.calls == ["create", "delete", "deleted"]  # Ctrl-C: removed at once


def test_images_on_a_backend_without_a_container_runtime_are_refused_before_anything_starts() -> None:
    from testbed.clusters.kwok import KwokCluster

    with pytest.raises(ClusterError, match="run no containers"):
        with bed_session(SPEC, KwokCluster("never-made"), images=("workload:1",)):
            pass


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc) -> bool:
        return False


# A run with the signal handlers installed, as the CLI and the pytest plugin install them; `ENDING` is how the
# bed ends before its teardown, in which the fake's delete signals the process again.
SCRIPT = textwrap.dedent("""
    import json, signal, sys
    from suites.unit.fake_backend import registered, signal_self
    from testbed.beds import bed_session
    from testbed.clusters.base import ClusterSpec
    from testbed.host import interrupts

    interrupts.install()
    signum, ending = int(sys.argv[1]), sys.argv[2]
    with registered() as fake:
        fake.on_delete = [signal_self(signum), signal_self(signum)]
        if ending == "interrupted-create":
            fake.on_create = [signal_self(signum)]
        try:
            with bed_session(ClusterSpec(name="b"), "fake", client=None):
                raise RuntimeError("the bed's user failed")
        except BaseException as exc:
            print(json.dumps({"calls": fake.calls, "running": sorted(fake.running), "raised": type(exc).__name__}))
""")


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM, signal.SIGHUP], ids=lambda s: signal.Signals(s).name)
@pytest.mark.parametrize("ending", ["interrupted-create", "failed-body"])
def test_a_signal_during_the_teardown_waits_for_it(signum: int, ending: str) -> None:
    out = subprocess.run([sys.executable, "-c", SCRIPT, str(int(signum)), ending], capture_output=True, text=True, cwd=REPO,
                         timeout=120, preexec_fn=default_signals)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["running"] == [], f"the bed was left running: {result}"
    assert result["calls"][-1] == "deleted", result
    assert result["raised"] in ("KeyboardInterrupt", "Terminated"), result  # the interrupt goes on after the teardown
    if ending == "failed-body":  # the first signal came in the teardown: it ran again, to its end
        assert result["calls"] == ["create", "delete", "delete", "deleted"], result
    else:  # the teardown began because of the first signal: the second one is ignored
        assert result["calls"] == ["create", "delete", "deleted"], result
    assert "while cleaning up" in out.stderr or "finishing the removal" in out.stderr


KILLED = textwrap.dedent("""
    import os, signal
    from suites.unit.fake_backend import registered
    from testbed.beds import bed_session
    from testbed.clusters.base import ClusterSpec

    with registered() as fake:
        fake.on_create = [lambda: os.kill(os.getpid(), signal.SIGKILL)]  # as subprocess.run or nox kill a run
        with bed_session(ClusterSpec(name="killed"), "fake", client=None):
            pass
""")


def test_a_bed_whose_owner_is_killed_is_removed_by_its_guardian(tmp_path: Path) -> None:
    journal = tmp_path / "journal"
    env = dict(os.environ, FAKE_BED_JOURNAL=str(journal), PYTHONPATH=str(REPO))
    out = subprocess.run([sys.executable, "-c", KILLED], capture_output=True, text=True, cwd=REPO, env=env, timeout=120)
    assert out.returncode == -signal.SIGKILL, out.stderr
    deadline = time.monotonic() + 60
    while not (journal.exists() and journal.read_text()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert journal.exists() and journal.read_text().startswith("deleted killed in "), "the killed run's bed was left"
    # a run that tears its bed down itself leaves its guardian nothing to do
    journal.unlink()
    done = KILLED.replace("[lambda: os.kill(os.getpid(), signal.SIGKILL)]", "[]")
    assert subprocess.run([sys.executable, "-c", done], cwd=REPO, env=env, timeout=120).returncode == 0
    time.sleep(2)
    assert [line.split(" in ")[0] for line in journal.read_text().splitlines()] == ["deleted killed"]
