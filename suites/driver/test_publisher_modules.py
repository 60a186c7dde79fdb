"""The running publisher's driver half never reaches for the catalog, nor loads the test bed.

The publisher process also plays the nodes' hardware (it provisions state directories), and that half
may read the catalog; the audit (fake_gpus/driver/audit.py) tells them apart by the code that asked.
The planted violations that show this audit failing are in suites/unit/test_layers.py."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import pytest

from conftest import driver_cluster
from fake_gpus.driver.audit import REPORT_ENV
from testbed.clusters.kwok import KwokCluster

pytestmark = pytest.mark.cluster


def test_running_publisher_driver_half_never_reads_the_catalog(bed, tmp_path: Path) -> None:
    reports = tmp_path / "modules"
    nodes = ["mod-static=h100-80gb:1:static-mig:all-balanced", "mod-dyn=h100-80gb:1:dynamic-mig", "mod-whole=b200-180gb:1:whole"]
    with driver_cluster(bed, "modules", nodes, env={REPORT_ENV: str(reports)}) as testbed:
        pid = int((KwokCluster(testbed.name).home / "publisher.pid").read_text())
        assert len(testbed.resource.list_resource_slice().items) >= 3  # the first publish is done
        target = reports / f"{pid}.json"
        os.kill(pid, signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not target.exists():
            assert time.monotonic() < deadline, "no module report from the publisher"
            time.sleep(0.05)
        report = json.loads(target.read_text())
    assert report["argv"][0].endswith("publisher.py") and "fake_gpus.driver.slices" in report["modules"]
    assert report["violations"] == []
    assert [m for m in report["modules"] if m.startswith("testbed")] == []
