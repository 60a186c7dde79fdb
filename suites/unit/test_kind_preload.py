"""The driver image's early load (testbed/clusters/kind/preload.py) with a stand-in kind and a scripted
containerd: it waits for every worker's containerd, loads once into all of them, reports kind's failure,
and a cancel stops kind's whole process group. No docker, no cluster."""

from __future__ import annotations

import sys
import threading
import time
from pathlib import Path

import pytest

from suites.processes import mentioning
from testbed.clusters.kind import preload as preload_module
from testbed.clusters.kind.preload import Preload, worker_names


def _kind(tmp_path: Path, body: str) -> Path:
    """A kind stand-in logging its arguments to `calls`, then running `body` (shell)."""
    script = tmp_path / "kind"
    script.write_text(f'#!/bin/bash\necho "$*" >> {tmp_path}/calls\n{body}\n')
    script.chmod(0o755)
    return script


def _answering(monkeypatch: pytest.MonkeyPatch, ready: dict[str, bool]) -> list[str]:
    asked: list[str] = []

    def answers(node: str) -> bool:
        asked.append(node)
        return ready.get(node, False)

    monkeypatch.setattr(preload_module, "containerd_answers", answers)
    monkeypatch.setattr(preload_module, "POLL_SECONDS", 0.05)
    return asked


def _left(tmp_path: Path) -> list[int]:
    return mentioning(str(tmp_path))


def test_worker_names_follow_kinds_numbering() -> None:
    assert worker_names("bed", 3) == ["bed-worker", "bed-worker2", "bed-worker3"]


def test_it_loads_once_every_worker_answers(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    ready = {"bed-worker": True, "bed-worker2": False}
    asked = _answering(monkeypatch, ready)
    job = Preload(_kind(tmp_path, "exit 0"), "bed", ["bed-worker", "bed-worker2"], ["img:1"])
    time.sleep(0.3)
    assert not (tmp_path / "calls").exists(), "kind load ran before every worker's containerd answered"
    assert "bed-worker2" in asked
    ready["bed-worker2"] = True
    job.finish()
    assert job.loaded and not job.error
    assert (tmp_path / "calls").read_text().splitlines() == ["load docker-image --name bed --nodes bed-worker,bed-worker2 img:1"]


def test_kinds_failure_is_reported_not_raised(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answering(monkeypatch, {"bed-worker": True})
    job = Preload(_kind(tmp_path, "echo 'ERROR: image: \"img:1\" not present locally' >&2; exit 1"), "bed", ["bed-worker"], ["img:1"])
    job.finish()
    assert not job.loaded and job.error == 'ERROR: image: "img:1" not present locally'


def test_a_failed_load_leaves_none_of_kinds_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # kind load that fails on one node returns with the other nodes' imports under way (pipes of their own)
    _answering(monkeypatch, {"bed-worker": True})
    child = f"{sys.executable} -c 'import time; time.sleep(600)' {tmp_path}/child >/dev/null 2>&1 </dev/null &"
    job = Preload(_kind(tmp_path, f"{child}\nsleep 0.5\necho 'ERROR: failed to load image' >&2; exit 1"), "bed", ["bed-worker"], ["img:1"])
    job.finish()
    assert not job.loaded and job.error == "ERROR: failed to load image"
    assert _left(tmp_path) == []


def test_a_worker_that_never_answers_ends_it_at_the_deadline(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answering(monkeypatch, {})
    job = Preload(_kind(tmp_path, "exit 0"), "bed", ["bed-worker"], ["img:1"], deadline_s=0.2)
    job.finish()
    assert not job.loaded and "bed-worker did not answer" in job.error
    assert not (tmp_path / "calls").exists()


def test_cancel_stops_kind_and_its_children(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # kind load runs `docker save | ctr import` children: a cancel (kind create failed, Ctrl-C) must leave none
    _answering(monkeypatch, {"bed-worker": True})
    child = f"{sys.executable} -c 'import time; time.sleep(600)' {tmp_path}/child"
    job = Preload(_kind(tmp_path, f"{child} &\nsleep 600"), "bed", ["bed-worker"], ["img:1"])
    deadline = time.monotonic() + 10
    while len(_left(tmp_path)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    assert len(_left(tmp_path)) >= 2, "the stand-in kind and its child never ran"
    finisher = threading.Thread(target=job.finish, kwargs={"cancel": True})
    started = time.monotonic()
    finisher.start()
    finisher.join(15)
    assert not finisher.is_alive() and time.monotonic() - started < 10
    assert not job.loaded and not job.error
    assert _left(tmp_path) == []


def test_cancel_before_any_worker_answers_runs_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _answering(monkeypatch, {})
    job = Preload(_kind(tmp_path, "exit 0"), "bed", ["bed-worker"], ["img:1"])
    job.finish(cancel=True)
    assert not job.loaded and not (tmp_path / "calls").exists()
