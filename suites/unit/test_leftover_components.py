"""The leftover scan (testbed.host.leftovers.snapshot/diff) names the bed's Python components too: the publisher
and the stand-in kubelet ran on after an interrupted run (issue 40) and the scan did not list them."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from hostenv.processes import terminate
from testbed.host import leftovers


@pytest.mark.parametrize("module", ["fake_gpus.machine.kwok_publisher", "testbed.kubelet", "fake_gpus.driver.kubeletplugin"])
def test_a_running_component_shows_in_the_snapshot_diff(module: str) -> None:
    before = leftovers.snapshot()
    # a process of the component's command line (`python -m MODULE --config ...`), idle instead of publishing
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "-m", module, "--config", "x"],
                            start_new_session=True)
    try:
        time.sleep(0.2)  # its command line is readable once exec is done
        found = leftovers.diff(before, leftovers.snapshot()).processes
        assert proc.pid in found, f"{module} not named by the leftover scan: {found}"
    finally:
        terminate(proc.pid)


def test_a_process_merely_named_like_a_component_is_not_listed() -> None:
    before = leftovers.snapshot()
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)", "fake_gpus.machine.kwok_publisher"],
                            start_new_session=True)
    try:
        time.sleep(0.2)
        assert proc.pid not in leftovers.diff(before, leftovers.snapshot()).processes
    finally:
        terminate(proc.pid)
