"""The campaign's GPU failures (testbed/campaign/gpu_failures.py) on real fake-NVML state directories: the seeded
schedule fails GPUs one at a time, heals each, leaves every GPU healthy at the end, and repeats with its seed."""

from __future__ import annotations

import time
from pathlib import Path

from fake_gpus.nvml import health, state
from testbed.campaign.gpu_failures import GpuFailures


def _dirs(tmp_path: Path) -> dict[str, Path]:
    dirs = {"a": tmp_path / "a", "b": tmp_path / "b"}
    state.create_state_dir(dirs["a"], [("h100-80gb", 2)])
    state.create_state_dir(dirs["b"], [("h200-141gb", 1)])
    return dirs


def _run(dirs: dict[str, Path], seed: int) -> GpuFailures:
    with GpuFailures(dirs, seed, limit=4, interval=(0.01, 0.02), down=(0.01, 0.02)) as failing:
        deadline = time.monotonic() + 10
        while len(failing.events) < 8 and time.monotonic() < deadline:
            time.sleep(0.01)
    return failing


def test_failures_alternate_with_heals_and_every_gpu_is_healed(tmp_path) -> None:
    dirs = _dirs(tmp_path)
    failing = _run(dirs, seed=3)
    assert not failing.errors
    actions = [e.action for e in failing.events]
    assert actions[1::2] == ["heal"] * 4 and all(a in ("xid-79", "lost") for a in actions[0::2]), actions
    assert failing.counts()["failed"] == failing.counts()["healed"] == 4
    for node, d in dirs.items():  # what the NVML library folds from the log: nothing lost at the end
        assert not any(h.lost for h in health.health(d).values()), (node, health.read_records(d))
        records = health.read_records(d)
        assert [r.kind for r in records] == [k for e in failing.events if e.node == node
                                            for k in (("xid",) if e.action == "xid-79" else (e.action,))]


def test_the_schedule_depends_only_on_the_seed(tmp_path) -> None:
    first = [(e.action, e.node, e.gpu) for e in _run(_dirs(tmp_path / "1"), seed=5).events]
    second = [(e.action, e.node, e.gpu) for e in _run(_dirs(tmp_path / "2"), seed=5).events]
    assert first == second


def test_a_failure_under_way_is_healed_when_the_run_ends(tmp_path) -> None:
    dirs = _dirs(tmp_path)
    with GpuFailures(dirs, 1, limit=1, interval=(0.01, 0.01), down=(30, 30)) as failing:
        deadline = time.monotonic() + 10
        while not failing.events and time.monotonic() < deadline:
            time.sleep(0.01)
    assert [e.action for e in failing.events][-1] == "heal"
    assert not any(h.lost for d in dirs.values() for h in health.health(d).values())
