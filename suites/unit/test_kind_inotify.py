"""kind's inotify preflight, on a /proc of our own: low limits are raised as root (and said so), refused in one
line otherwise, and a kind `create` stops on them before it installs or starts anything."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.clusters import base
from testbed.clusters.kind import cluster as kind_cluster
from testbed.clusters.kind import inotify
from testbed.clusters.layout import Layout, Mode, NodeSpec


def _proc(tmp_path: Path, instances: int, watches: int) -> Path:
    folder = tmp_path / "sys" / "fs" / "inotify"
    folder.mkdir(parents=True)
    (folder / "max_user_instances").write_text(f"{instances}\n")
    (folder / "max_user_watches").write_text(f"{watches}\n")
    return tmp_path


def _value(proc: Path, name: str) -> int:
    return int((proc / "sys" / "fs" / "inotify" / name).read_text())


def test_enough_is_left_alone(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 1024, 524288)
    assert inotify.ensure_limits(proc, is_root=lambda: True) == []
    assert _value(proc, "max_user_instances") == 1024  # never lowered


def test_root_raises_only_what_is_low(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 128, 1048576)  # the kernel's default instances; watches already higher
    raised = inotify.ensure_limits(proc, is_root=lambda: True)
    assert raised == [inotify.Raised("max_user_instances", 128, 512)]
    assert _value(proc, "max_user_instances") == 512 and _value(proc, "max_user_watches") == 1048576


def test_without_root_one_line_says_what_to_set(tmp_path: Path) -> None:
    proc = _proc(tmp_path, 128, 8192)
    with pytest.raises(inotify.InotifyLimitError) as caught:
        inotify.ensure_limits(proc, is_root=lambda: False)
    message = str(caught.value)
    assert "\n" not in message
    assert "fs.inotify.max_user_instances is 128" in message and "fs.inotify.max_user_watches is 8192" in message
    assert "sysctl -w fs.inotify.max_user_instances=512 fs.inotify.max_user_watches=524288" in message
    assert _value(proc, "max_user_instances") == 128  # nothing written


def test_kind_create_stops_on_low_limits_before_anything_starts(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(inotify, "PROC", _proc(tmp_path, 128, 524288))
    monkeypatch.setattr(inotify, "_is_root", lambda: False)

    def started(*args, **kwargs):
        raise AssertionError("create went past the inotify check")

    monkeypatch.setattr(kind_cluster.hostdeps, "prefetch", started)
    monkeypatch.setattr(kind_cluster, "ensure_engine", started)
    layout = Layout((NodeSpec("gpu-a", "h100-80gb", 1, Mode("whole")),), name="t")
    with pytest.raises(base.ClusterError, match=r"max_user_instances is 128.*sysctl -w fs.inotify.max_user_instances=512"):
        kind_cluster.KindCluster("inotify-test").create(base.ClusterSpec(name="inotify-test", k8s="1.34", layout=layout))
