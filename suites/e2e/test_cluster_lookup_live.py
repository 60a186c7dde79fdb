"""A cluster is found by its name whatever its backend: `status --backend kind` of a KWOK cluster names it
as it is, and `down` without --backend tears it down (through the real CLI and a real KWOK cluster).

The kind side of the lookup is covered without Docker in suites/unit/test_cluster_lookup.py: a kind bed takes
minutes to come up."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from hostenv.processes import run_child
from testbed.clusters.kwok import KwokCluster

pytestmark = pytest.mark.cluster


def cli(*args: str) -> subprocess.CompletedProcess:
    return run_child([sys.executable, "-m", "testbed.cli", *args], capture_output=True, text=True, timeout=300)


@pytest.fixture
def name() -> str:
    name = f"lookup-{uuid.uuid4().hex[:8]}"
    yield name
    KwokCluster(name).delete()  # teardown even when an assertion failed half-way


def test_status_in_the_wrong_backend_names_it_and_down_finds_it_alone(name: str) -> None:
    up = cli("up", "--backend", "kwok", "--name", name, "--node", "gpu-0=h100-80gb:1:whole")
    assert up.returncode == 0, up.stderr
    status = cli("status", "--name", name, "--backend", "kind")
    assert status.returncode == 1 and status.stdout == ""
    assert status.stderr.startswith(f"dra-testbed: error: no kind cluster named '{name}'; the clusters that exist: ")
    assert f"{name} (kwok)" in status.stderr and status.stderr.count("\n") == 1, status.stderr
    assert cli("status", "--name", name).returncode == 0  # every backend: the KWOK one, running
    down = cli("down", "--name", name)
    assert down.returncode == 0 and f"deleted kwok cluster '{name}'" in down.stderr, down.stderr
    assert not KwokCluster(name).exists()
    again = cli("down", "--name", name)
    assert again.returncode == 0 and again.stderr.startswith(f"no cluster named '{name}', nothing to do; "), again.stderr
