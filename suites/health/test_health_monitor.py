"""Our driver's health monitor process against the fake NVML, with faults injected from this process (the
injector is not the monitor): the taints it reports per node, as NVIDIA's rule derives them."""

from __future__ import annotations

import json
import os
import select
import subprocess
import sys
import time
from pathlib import Path
from typing import Iterator

import pytest

from fake_gpus.driver.faults import fault_env
from fake_gpus.nvml import health as injector
from fake_gpus.nvml import state
from fake_gpus.nvml.build import ensure_library

REPORT_BOUND_S = 5.0  # the monitor waits 200 ms at a time: a report seconds late is a broken monitor
XID_KEY, LOST_KEY = "gpu.nvidia.com/xid", "gpu.nvidia.com/gpu-lost"


class Monitor:
    """A running health monitor and the reports it printed."""

    def __init__(self, state_dir: Path, mode: str, faults: tuple[str, ...] = (), extra: str = "") -> None:
        env = {**os.environ, **fault_env(faults)}
        self.process = subprocess.Popen(
            [sys.executable, "-m", "fake_gpus.driver.health_monitor", "--state-dir", str(state_dir),
             "--nvml-lib-dir", str(ensure_library()), "--mode", mode, "--additional-xids-to-ignore", extra],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
        self.last = self.next_report()

    def next_report(self, bound: float = REPORT_BOUND_S) -> dict:
        ready, _, _ = select.select([self.process.stdout], [], [], bound)
        assert ready, f"no report within {bound} s"
        report = json.loads(self.process.stdout.readline())["taints"]
        # the order a taint came in is the publisher's to sort by; compared here: what the API gets
        self.last = {scope: [{k: v for k, v in t.items() if k != "order"} for t in taints] for scope, taints in report.items()}
        return self.last

    def quiet(self, seconds: float = 1.0) -> bool:
        return not select.select([self.process.stdout], [], [], seconds)[0]

    def stop(self) -> int:
        self.process.stdin.close()
        return self.process.wait(timeout=10)


@pytest.fixture
def node(tmp_path: Path) -> Path:
    state_dir = tmp_path / "node"
    state.create_state_dir(state_dir, [("h100-80gb", 2)])
    return state_dir


@pytest.fixture
def monitors() -> Iterator[list[Monitor]]:
    started: list[Monitor] = []
    yield started
    for m in started:
        if m.process.poll() is None:
            m.stop()


def start(monitors: list[Monitor], *args, **kwargs) -> Monitor:
    monitors.append(Monitor(*args, **kwargs))
    return monitors[-1]


def test_fatal_xid_taints_its_gpu_noschedule_in_bounded_time(node: Path, monitors) -> None:
    m = start(monitors, node, "whole")
    assert m.last == {}
    began = time.monotonic()
    injector.append(node, 1, "xid", 79)
    assert m.next_report() == {"gpu-1": [{"key": XID_KEY, "value": "79", "effect": "NoSchedule"}]}
    assert time.monotonic() - began < 1.0
    assert m.stop() == 0


def test_ignored_and_additional_xids_take_effect_none_and_ecc_taints_nothing(node: Path, monitors) -> None:
    m = start(monitors, node, "whole", extra="48")
    injector.append(node, 0, "ecc-double")
    injector.append(node, 0, "ecc-single")
    assert m.quiet()
    injector.append(node, 0, "xid", 13)
    assert m.next_report() == {"gpu-0": [{"key": XID_KEY, "value": "13", "effect": "None"}]}
    injector.append(node, 1, "xid", 48)
    assert m.next_report()["gpu-1"] == [{"key": XID_KEY, "value": "48", "effect": "None"}]


def test_lost_gpu_taints_every_device_and_heal_lifts_it(node: Path, monitors) -> None:
    m = start(monitors, node, "whole")
    injector.append(node, 0, "lost")
    assert m.next_report() == {"*": [{"key": LOST_KEY, "effect": "NoSchedule"}]}
    injector.append(node, 0, "heal")
    assert m.next_report() == {}


def test_taint_never_removed_keeps_the_lost_taint_after_heal(node: Path, monitors) -> None:
    m = start(monitors, node, "whole", faults=("taint-never-removed",))
    injector.append(node, 0, "lost")
    assert m.next_report() == {"*": [{"key": LOST_KEY, "effect": "NoSchedule"}]}
    injector.append(node, 0, "heal")
    assert m.quiet(1.5) and m.last != {}


def test_ignored_xids_wrong_makes_an_application_xid_fatal(node: Path, monitors) -> None:
    m = start(monitors, node, "whole", faults=("ignored-xids-wrong",))
    injector.append(node, 0, "xid", 13)
    assert m.next_report()["gpu-0"][0]["effect"] == "NoSchedule"


def test_dynamic_mig_gpu_wide_xid_taints_the_whole_gpu_scope(node: Path, monitors) -> None:
    m = start(monitors, node, "dynamic-mig")
    injector.append(node, 1, "xid", 79)
    [scope] = m.next_report()
    assert scope.startswith("gpu:GPU-")
