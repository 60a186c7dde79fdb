"""`kind create cluster` is tried once more when a node missed kind's fixed 30 s to boot (a loaded machine), and
only then: any other failure, or a second slow boot, is the error. kind here is a stand-in script that answers
as kind does and records its calls; the cluster's files go to a state dir of the test's own."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.clusters.base import ClusterError
from testbed.clusters.kind.cluster import KindCluster

SLOW = ('ERROR: failed to create cluster: could not find a log line that matches '
        '"Reached target .*Multi-User System.*|detected cgroup v1"')


def _kind(tmp_path: Path, failures: list[str]) -> Path:
    """A `kind` whose n-th `create` prints failures[n] and exits 1 (succeeds past the list); logs every call."""
    script = tmp_path / "kind"
    lines = ["#!/bin/sh", f'echo "$*" >> {tmp_path}/calls', f'n=$(grep -c "^create" {tmp_path}/calls)']
    for index, message in enumerate(failures, start=1):
        lines.append(f'if [ "$1" = create ] && [ "$n" = {index} ]; then echo \'{message}\' >&2; exit 1; fi')
    lines.append("exit 0")
    script.write_text("\n".join(lines) + "\n")
    script.chmod(0o755)
    return script


class _Early:
    """Stands in for an attempt's early deploy (early_deploy.py): records that it was finished."""

    def __init__(self, tmp_path: Path, started: list[_Early]) -> None:
        self.kubeconfig = tmp_path / f"kubeconfig.early-{len(started)}"
        self.kubeconfig.write_text("")
        self.finished = False
        started.append(self)

    def finish(self) -> None:
        self.finished = True


def _create(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failures: list[str], started: list[_Early] | None = None) -> list[str]:
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path / "state"))
    cluster = KindCluster("retry-test")
    cluster.home.mkdir(parents=True)
    started = [] if started is None else started
    try:
        cluster._create_nodes(_kind(tmp_path, failures), "img", tmp_path / "kind.yaml", tmp_path / "kubeconfig", 2,
                              lambda: _Early(tmp_path, started))
    finally:
        calls = (tmp_path / "calls").read_text().splitlines()
    return [c.split()[0] for c in calls]


def test_a_slow_boot_is_removed_and_tried_once_more(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    started: list[_Early] = []
    assert _create(tmp_path, monkeypatch, [SLOW], started) == ["create", "delete", "create"]
    # the second attempt's nodes are new: it has an early deploy of its own; both are finished, their files gone
    assert len(started) == 2 and all(e.finished and not e.kubeconfig.exists() for e in started)


def test_a_second_slow_boot_is_the_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ClusterError, match="could not find a log line"):
        _create(tmp_path, monkeypatch, [SLOW, SLOW])
    assert (tmp_path / "calls").read_text().splitlines()[-1].startswith("create")


def test_any_other_failure_is_not_retried(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ClusterError, match="port is already allocated"):
        _create(tmp_path, monkeypatch, ["ERROR: failed to create cluster: port is already allocated"])
    assert [c.split()[0] for c in (tmp_path / "calls").read_text().splitlines()] == ["create"]
