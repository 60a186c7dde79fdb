"""The existing backend: the suites' view of a cluster given only by its kubeconfig."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from testbed.clusters.base import ClusterError, ClusterSpec
from testbed.clusters.existing import ExistingCluster
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster


def test_existing_cluster_is_checked_and_never_torn_down(testbed: TestBed) -> None:
    existing = ExistingCluster("mine", testbed.kubeconfig)
    assert existing.create(ClusterSpec(name="mine")) == testbed.kubeconfig
    status = existing.status()
    assert status.running and status.nodes == len(testbed.layout.nodes) and status.resource_slices >= 1
    existing.delete()
    assert ExistingCluster("mine", testbed.kubeconfig).status().running


def test_unreachable_or_missing_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ClusterError, match="needs a readable kubeconfig"):
        ExistingCluster("x", tmp_path / "nope").create(ClusterSpec())
    dead = tmp_path / "dead.yaml"
    dead.write_text(
        "apiVersion: v1\nkind: Config\nclusters: [{name: c, cluster: {server: 'https://127.0.0.1:1'}}]\n"
        "users: [{name: u, user: {token: x}}]\ncontexts: [{name: c, context: {cluster: c, user: u}}]\ncurrent-context: c\n"
    )
    with pytest.raises(ClusterError, match="not reachable"):
        ExistingCluster("x", dead).create(ClusterSpec())


def test_suites_run_against_an_existing_cluster_by_kubeconfig(testbed: TestBed) -> None:
    # a nested pytest run of the first-allocation suite pointed at the session's cluster, as a user would
    here = Path(__file__).resolve().parent
    layout = Path(__file__).resolve().parents[2] / "clusters" / "layouts" / "mixed-h100-b200.yaml"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", str(here / "test_first_allocation.py"), "-q", "-p", "no:cacheprovider",
         "--kubeconfig", str(testbed.kubeconfig), "--layout", str(layout), "-k", "b200_node"],
        capture_output=True, text=True, cwd=here.parents[1], timeout=300,
    )
    assert run.returncode == 0, run.stdout[-2000:]
    assert "1 passed" in run.stdout
