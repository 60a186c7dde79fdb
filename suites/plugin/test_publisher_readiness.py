"""The slice publisher's readiness endpoint (the kind DaemonSet's readinessProbe): ready once the node's
slices are in the API, not ready while it cannot reach the API.

The publisher runs as the DaemonSet runs it (`python -m fake_gpus.driver.node_publisher`) against the
plugin suite's apiserver, under a driver name of its own so it never meets the bed's own publisher.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from typing import Iterator

import pytest
from kubernetes import client

from conftest import NODE, REPO
from fake_gpus.driver.identity import DRIVER_ENV
from suites.plugin.test_plugin_readiness import _free_port, _probe

DRIVER = "ready.dra-testbed.io"


@pytest.fixture
def publisher(apiserver, nvml_lib_dir, state_dir) -> Iterator:
    """publisher(kubeconfig=the apiserver's) -> the readiness port of a running node publisher; stopped, its slices removed."""
    procs: list[subprocess.Popen] = []

    def start(kubeconfig=None) -> int:
        port = _free_port()
        env = {k: v for k, v in os.environ.items() if k not in ("DRA_TESTBED_FAULTS", "NVIDIA_VISIBLE_DEVICES")}
        env.update({DRIVER_ENV: DRIVER, "PYTHONPATH": str(REPO)})
        procs.append(subprocess.Popen([sys.executable, "-m", "fake_gpus.driver.node_publisher", "--node-name", NODE,
                                       "--state-dir", str(state_dir), "--nvml-lib-dir", str(nvml_lib_dir),
                                       "--kubeconfig", str(kubeconfig or apiserver.kubeconfig), "--ready-port", str(port)],
                                      env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
        return port

    yield start
    for proc in procs:
        proc.terminate()
        proc.wait(timeout=60)
    resource = client.ResourceV1Api(apiserver.api)
    for s in resource.list_resource_slice().items:
        if s.spec.driver == DRIVER:
            resource.delete_resource_slice(s.metadata.name)


def _answer_within(port: int, code: int, seconds: float) -> str:
    deadline = time.monotonic() + seconds
    while True:
        try:
            got, body = _probe(port)
        except OSError:  # not listening yet
            got, body = None, ""
        if got == code:
            return body
        assert time.monotonic() < deadline, f"/readyz did not answer {code} within {seconds:.0f}s (last: {got} {body!r})"
        time.sleep(0.5)


def test_ready_once_the_nodes_slices_are_in_the_api(publisher, apiserver) -> None:
    port = publisher()
    _answer_within(port, 200, 120)
    mine = [s for s in client.ResourceV1Api(apiserver.api).list_resource_slice(field_selector=f"spec.nodeName={NODE}").items
            if s.spec.driver == DRIVER]
    assert mine and all(s.spec.devices for s in mine)


def test_not_ready_while_it_cannot_reach_the_api(publisher, apiserver, tmp_path) -> None:
    import yaml

    config = yaml.safe_load(apiserver.kubeconfig.read_text())
    for cluster in config["clusters"]:  # the same cluster at a port where nothing listens
        cluster["cluster"]["server"] = f"https://127.0.0.1:{_free_port()}"
    away = tmp_path / "kubeconfig"
    away.write_text(yaml.safe_dump(config))
    port = publisher(kubeconfig=away)
    deadline = time.monotonic() + 60
    while "cannot start" not in (body := _answer_within(port, 503, 60)):  # first "not published yet", then why
        assert time.monotonic() < deadline, body
        time.sleep(0.5)
    time.sleep(5)
    assert _probe(port)[0] == 503  # and it stays so
