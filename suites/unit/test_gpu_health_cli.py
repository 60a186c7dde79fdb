"""`dra-testbed gpu fail|heal`: bad input is one line, exit 2, and nothing is appended to any node's events;
good input appends exactly one record. Clusters are stand-ins (a folder per cluster, a KWOK-shaped
`nvml/<node>` state directory); the library's side is suites/nvml/test_nvml_events.py."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_gpus.nvml import health, state
from testbed.cli.main import main
from testbed.clusters import registry
from suites.unit.test_cluster_lookup import _StandIn
from testbed.clusters.base import ClusterSpec, ClusterStatus


class _Kwok(_StandIn):
    """test_cluster_lookup's folder cluster, its `status` saying running or not as the test sets."""

    backend = "kwok"
    running = True

    def status(self) -> ClusterStatus:
        return ClusterStatus(self.name, self.backend, _Kwok.running, None, "v1.34.0", 1, 1)


class _Kind(_Kwok):
    backend = "kind"


@pytest.fixture
def node(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """KWOK cluster `bed` with node `n1` of two GPUs; returns the node's state directory."""
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path))
    monkeypatch.setattr("testbed.host.interrupts.install", lambda: False)
    monkeypatch.setattr(registry, "backend_class", {"kwok": _Kwok, "kind": _Kind}.__getitem__)
    monkeypatch.setattr(_Kwok, "running", True)
    monkeypatch.setattr(_StandIn, "raises", None)
    cluster = registry.cluster_for("kwok", "bed")
    cluster.create(ClusterSpec(name="bed"))
    d = cluster.home / "nvml" / "n1"
    state.create_state_dir(d, [("h100-80gb", 2)])
    return d


def _run(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    try:
        code = main(list(argv))
    except SystemExit as exc:  # argparse's refusals leave through the parser's error()
        code = int(exc.code or 0)
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize("argv, says", [
    (["fail", "--name", "nope", "n1", "0", "--xid", "79"], "no cluster named 'nope'"),
    (["fail", "--name", "bed", "n9", "0", "--xid", "79"], "has no GPU node 'n9'; valid: n1"),
    (["fail", "--name", "bed", "n1", "2", "--xid", "79"], "node n1 has no GPU '2'; valid: an index 0 to 1"),
    (["fail", "--name", "bed", "n1", "GPU-00000000-0000-0000-0000-000000000000", "--lost"], "has no GPU 'GPU-0000"),
    (["fail", "--name", "bed", "n1", "0", "--xid", "0"], "valid: an Xid from 1 to 999"),
    (["fail", "--name", "bed", "n1", "0", "--xid", "1000"], "valid: an Xid from 1 to 999"),
    (["fail", "--name", "bed", "n1", "0", "--xid", "x"], "valid: an Xid from 1 to 999"),
    (["fail", "--name", "bed", "n1", "0", "--ecc", "triple"], "invalid choice: 'triple'"),
    (["fail", "--name", "bed", "n1", "0"], "one of the arguments --xid --ecc --lost is required"),
    (["fail", "--name", "bed", "n1", "0", "--xid", "79", "--lost"], "not allowed with argument"),
    (["heal", "--name", "bed", "n1", "5"], "node n1 has no GPU '5'"),
])
def test_bad_input_is_one_line_exit_2_and_writes_nothing(node, capsys, argv, says) -> None:
    code, out, err = _run(capsys, "gpu", *argv)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and says in err, err
    assert not (node / "events").exists()


def test_a_cluster_not_running_is_refused(node, capsys, monkeypatch) -> None:
    monkeypatch.setattr(_Kwok, "running", False)
    code, _, err = _run(capsys, "gpu", "fail", "--name", "bed", "n1", "0", "--xid", "79")
    assert code == 2 and "cluster 'bed' is not running" in err and err.count("\n") == 1
    assert not (node / "events").exists()


def test_fail_and_heal_append_one_record_each(node, capsys) -> None:
    uuid = state.validate_state_dir(node)[0][1].uuid
    code, out, err = _run(capsys, "gpu", "fail", "--name", "bed", "n1", uuid, "--xid", "79")
    assert code == 0, err
    assert "Xid 79: GPU has fallen off the bus" in out and "event 1" in out
    assert _run(capsys, "gpu", "fail", "--name", "bed", "n1", "1", "--lost")[0] == 0
    code, _, err = _run(capsys, "gpu", "fail", "--name", "bed", "n1", "1", "--ecc", "double")
    assert code == 2 and "GPU 1 of node n1 is lost" in err, "a lost GPU reports nothing more"
    assert _run(capsys, "gpu", "heal", "--name", "bed", "n1", "1")[0] == 0
    assert [(r.seq, r.gpu, r.kind, r.data) for r in health.read_records(node)] == [
        (1, 1, "xid", 79), (2, 1, "lost", 0), (3, 1, "heal", 0)]
    assert health.health(node)[1].lost is False
