"""Sizes have sane bounds: a layout above a backend's bound is refused in one line (exit 2, nothing
started) unless --allow-large says so; no layout expands past the hard limit at all."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml

from hostenv.processes import run_child
from testbed.clusters.base import ClusterSpec
from testbed.clusters.kind.cluster import MAX_WORKERS, KindCluster
from testbed.clusters.kwok.cluster import MAX_GPUS, MAX_NODES, KwokCluster
from testbed.clusters.layout import HARD_MAX_NODES, LayoutError, check_size, from_flags, load_layout


def layout_file(tmp_path: Path, replicas: int, count: int = 8) -> Path:
    path = tmp_path / "big.yaml"
    path.write_text(yaml.safe_dump({"nodes": [{"name": "h", "board": "h100-80gb", "count": count, "replicas": replicas}]}))
    return path


def test_replicas_past_the_hard_limit_are_refused_before_any_node_exists(tmp_path: Path) -> None:
    with pytest.raises(LayoutError, match=f"valid: 1 to {HARD_MAX_NODES}"):
        load_layout(layout_file(tmp_path, 100_000))


def test_many_entries_past_the_hard_limit_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "wide.yaml"
    entries = [{"name": f"h{i}", "board": "h100-80gb", "count": 1, "replicas": HARD_MAX_NODES // 2} for i in range(3)]
    path.write_text(yaml.safe_dump({"nodes": entries}))
    with pytest.raises(LayoutError, match="over the limit"):
        load_layout(path)


@pytest.mark.parametrize(("nodes", "count", "refused"), [
    (MAX_NODES, 1, False), (MAX_NODES + 1, 1, "nodes"), (MAX_GPUS // 8, 8, False), (MAX_GPUS // 8 + 1, 8, "GPUs")])
def test_kwok_bounds_on_nodes_and_gpus(tmp_path: Path, nodes: int, count: int, refused: str | bool) -> None:
    layout = load_layout(layout_file(tmp_path, nodes, count))
    if refused:
        with pytest.raises(LayoutError, match=f"{refused}; valid for kwok: .*--allow-large"):
            check_size(layout, "kwok", MAX_NODES, MAX_GPUS, allow_large=False)
    else:
        check_size(layout, "kwok", MAX_NODES, MAX_GPUS, allow_large=False)
    check_size(layout, "kwok", MAX_NODES, MAX_GPUS, allow_large=True)


@pytest.mark.parametrize("cluster", [KwokCluster, KindCluster])
def test_backends_refuse_oversized_layouts_before_starting_anything(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cluster) -> None:
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path / "state"))
    layout = from_flags([f"n{i}=h100-80gb:8" for i in range(max(MAX_WORKERS, MAX_NODES // 8) * 9)])
    with pytest.raises(LayoutError, match="--allow-large"):
        cluster("big").create(ClusterSpec(name="big", layout=layout))
    assert not (tmp_path / "state").exists()


def test_up_with_a_huge_layout_is_one_line_exit_2_and_starts_nothing(tmp_path: Path) -> None:
    state = tmp_path / "state"
    for replicas, extra in ((100_000, []), (MAX_NODES + 1, []), (HARD_MAX_NODES + 1, ["--allow-large"])):
        out = run_child([sys.executable, "-m", "testbed.cli", "up", "--name", "big", "--layout",
                         str(layout_file(tmp_path, replicas, 1)), *extra], capture_output=True, text=True,
                        env=dict(os.environ, DRA_TESTBED_STATE=str(state)), timeout=120)
        assert out.returncode == 2, out.stderr
        assert len(out.stderr.strip().splitlines()) == 1 and "valid" in out.stderr, out.stderr
        assert not state.exists()
