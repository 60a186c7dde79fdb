"""The running kubelet plugin never loads the catalog or the test bed (fake_gpus/driver/audit.py).

The planted violations that show this audit failing are in suites/unit/test_layers.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

from fake_gpus.driver.audit import REPORT_ENV
from test_kubelet_plugin import MIG_1G


def module_report(pid: int, folder: Path) -> dict:
    """Ask the process for its module report (SIGUSR1) and read it."""
    target = folder / f"{pid}.json"
    target.unlink(missing_ok=True)
    os.kill(pid, signal.SIGUSR1)
    deadline = time.monotonic() + 30
    while not target.exists():
        assert time.monotonic() < deadline, f"no module report from pid {pid}"
        time.sleep(0.05)
    return json.loads(target.read_text())


def test_running_plugin_loads_neither_the_catalog_nor_the_testbed(start_plugin, state_dir, kubelet, make_claim, node_dir) -> None:
    reports = node_dir / "modules"
    plugin = start_plugin(state_dir, env={REPORT_ENV: str(reports)})
    k = kubelet(plugin)
    k.notify_registered(True)
    claim = make_claim([MIG_1G])
    assert k.prepare([claim]).claims[claim.uid].error == ""  # the prepare path's lazy imports load too
    report = module_report(plugin.proc.pid, reports)
    assert "fake_gpus.driver.kubeletplugin.server" in report["modules"]  # the report is the plugin's
    assert report["violations"] == []
    assert [m for m in report["modules"] if m.startswith(("fake_gpus.catalog", "testbed"))] == []
    assert k.unprepare([claim]).claims[claim.uid].error == ""
