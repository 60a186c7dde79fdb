"""`dra-testbed gpu fail|heal` on a kind cluster: the node is named by its layout name or its kind node
(container) name, and the record lands in the host side of that node's state mount,
`<home>/nodes/<layout node>/nvml` (testbed/clusters/kind/cluster.py plan_nodes). The cluster is a stand-in
folder; suites/kind/test_kind_gpu_health.py checks that NVML inside a real node reads the record."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_gpus.nvml import health, state
from testbed.clusters import registry
from testbed.clusters.base import ClusterSpec
from testbed.clusters.kind import KindCluster
from testbed.clusters.layout import Layout, parse_node_flag
from suites.unit.test_gpu_health_cli import _Kind, _Kwok, _run, node  # noqa: F401  (node: a fixture)


class _KindNamed(_Kind):
    """The stand-in kind cluster, naming its nodes as kind does."""

    kind_name = KindCluster.kind_name
    node_name = KindCluster.node_name


@pytest.fixture
def kind_nodes(node: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Path]:
    """Beside test_gpu_health_cli's KWOK cluster (its `node` fixture, which sets the state folder and
    stand-ins), kind cluster `kb` of layout nodes a (one GPU) and b (two GPUs); layout name -> state directory."""
    monkeypatch.setattr(registry, "backend_class", {"kwok": _Kwok, "kind": _KindNamed}.__getitem__)
    cluster = registry.cluster_for("kind", "kb")
    layout = Layout((parse_node_flag("a=h100-80gb:1:whole"), parse_node_flag("b=h100-80gb:2:whole")), name="kb")
    spec = ClusterSpec(name="kb", layout=layout)
    cluster.create(spec)
    cluster.record_spec(spec, "v1.34.0")
    dirs = {}
    for spec_node in layout.nodes:
        dirs[spec_node.name] = cluster.home / "nodes" / spec_node.name / "nvml"
        state.create_state_dir(dirs[spec_node.name], [("h100-80gb", spec_node.count)])
    return dirs


@pytest.mark.parametrize("name", ["b", "kb-worker2"])
def test_a_kind_node_is_found_by_layout_or_node_name(kind_nodes, capsys, name) -> None:
    code, _, err = _run(capsys, "gpu", "fail", "--name", "kb", name, "1", "--xid", "79")
    assert code == 0, err
    assert [(r.gpu, r.kind, r.data) for r in health.read_records(kind_nodes["b"])] == [(1, "xid", 79)]
    assert health.read_records(kind_nodes["a"]) == []


def test_an_unknown_kind_node_lists_both_names(kind_nodes, capsys) -> None:
    code, out, err = _run(capsys, "gpu", "heal", "--name", "kb", "kb-worker3", "0")
    assert (code, out) == (2, "") and err.count("\n") == 1, err
    assert "has no GPU node 'kb-worker3'; valid: a, b, kb-worker, kb-worker2" in err, err
