"""`up` on KWOK and the publisher it starts never load the client's typed API classes for core, resources, RBAC
or admission policies: importing them costs seconds of CPU (CoreV1Api alone 1.8 s) on the two cores kwokctl's
components start on, so their calls go by path (fake_gpus/driver/rest.py). Only VersionApi (0.01 s) may load."""

from __future__ import annotations

import json
import os
import signal
import sys
import time
import uuid
from pathlib import Path

import pytest

from kubernetes.client.exceptions import ApiException

from fake_gpus.driver import rest
from fake_gpus.driver.audit import REPORT_ENV
from hostenv.processes import run_child
from testbed.clusters.kwok import KwokCluster

pytestmark = pytest.mark.cluster

REPO = Path(__file__).resolve().parents[2]
CHEAP = {"kubernetes.client.api.version_api"}
UP = """
import json, sys
from testbed.cli import main as cli
code = cli.main(["up", "--name", sys.argv[1], "--node", "typed-a=h100-80gb:1:dynamic-mig", "--node", "typed-b=b200-180gb:1:whole"])
print(json.dumps({"code": code, "apis": sorted(m for m in sys.modules if m.startswith("kubernetes.client.api."))}))
"""


def test_up_and_its_publisher_load_no_typed_api_but_version(tmp_path: Path) -> None:
    name = f"typed-{uuid.uuid4().hex[:6]}"
    reports = tmp_path / "modules"
    try:
        # setup: `up` as the command runs it, the publisher reporting its modules on SIGUSR1
        out = run_child([sys.executable, "-c", UP, name], capture_output=True, text=True, timeout=600, cwd=REPO,
                        env=dict(os.environ, **{REPORT_ENV: str(reports)}))
        assert out.returncode == 0, out.stderr[-2000:]
        up = json.loads(out.stdout.strip().splitlines()[-1])
        assert up["code"] == 0
        pid = int((KwokCluster(name).home / "publisher.pid").read_text())
        os.kill(pid, signal.SIGUSR1)
        target, deadline = reports / f"{pid}.json", time.monotonic() + 30
        while not target.exists():
            assert time.monotonic() < deadline, "no module report from the publisher"
            time.sleep(0.05)
        publisher = json.loads(target.read_text())
        # the calls by path behave as the typed ones: the client's errors, a node that exists left as it is
        api = KwokCluster(name).api_client()
        try:
            with pytest.raises(ApiException) as missing:
                rest.request(api, "GET", "/api/v1/nodes/no-such-node")
            node = rest.request(api, "GET", "/api/v1/nodes/typed-a")
            assert rest.create(api, "/api/v1/nodes", {"metadata": {"name": "typed-a"}}, exist_ok=True) is None
            with pytest.raises(ApiException) as conflict:
                rest.create(api, "/api/v1/nodes", {"metadata": {"name": "typed-a"}})
            typed = rest.request(api, "GET", "/api/v1/nodes", returns="V1NodeList", label_selector="kubernetes.io/hostname=typed-a")
        finally:
            api.close()
    finally:
        run_child([sys.executable, "-m", "testbed.cli", "down", "--name", name], capture_output=True, timeout=300, cwd=REPO)
    # assess: the command's own process and the publisher's (which published both nodes with their tokens)
    assert set(up["apis"]) <= CHEAP, up["apis"]
    assert set(publisher["client_apis"]) <= CHEAP, publisher["client_apis"]
    assert (missing.value.status, conflict.value.status) == (404, 409)
    assert [n.metadata.uid for n in typed.items] == [node["metadata"]["uid"]]
