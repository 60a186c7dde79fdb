"""Where a cluster's logs go: outside its home, so a failed `up` that kept them leaves no "cluster" behind."""

from __future__ import annotations

import pytest

from testbed.clusters.base import FAILURE_LOGS_ENV
from testbed.clusters.kind.cluster import KindCluster
from testbed.clusters.kwok.cluster import KwokCluster
from testbed.clusters.registry import find_clusters


@pytest.mark.parametrize("cls", [KwokCluster, KindCluster])
def test_logs_kept_outside_the_home_are_not_a_cluster(cls, tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path))
    monkeypatch.delenv(FAILURE_LOGS_ENV, raising=False)
    cluster = cls("logs-only")
    folder = cluster.logs_folder()
    folder.mkdir(parents=True)
    (folder / "kind-logs.txt").write_text("what a failed up left")
    assert not folder.is_relative_to(cluster.home) and not folder.is_relative_to(cluster.home.parent)
    assert find_clusters("logs-only") == []  # a second `up` of the name is not refused as "already exists"
    assert folder.name.startswith(f"{cluster.backend}-logs-only-")


def test_ci_collects_logs_under_its_folder(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path / "state"))
    monkeypatch.setenv(FAILURE_LOGS_ENV, str(tmp_path / "ci-logs"))
    assert KindCluster("c").logs_folder().parent == tmp_path / "ci-logs"
