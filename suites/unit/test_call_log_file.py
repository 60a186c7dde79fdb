"""The kubelet plugin's call log file (fake_gpus/driver/kubeletplugin/calllog.py): where it goes, and lines
that stay whole when calls are served at once."""

from __future__ import annotations

import threading
from types import SimpleNamespace

from fake_gpus.driver.kubeletplugin.calllog import CALL_LOG_ENV, CallLog, parse_calls


def test_off_unless_the_variable_is_set(tmp_path, monkeypatch) -> None:
    monkeypatch.delenv(CALL_LOG_ENV, raising=False)
    assert CallLog.from_env(tmp_path, "n") is None
    monkeypatch.setenv(CALL_LOG_ENV, "")
    assert CallLog.from_env(tmp_path, "n") is None


def test_a_relative_path_is_inside_the_plugin_directory_an_absolute_one_is_kept(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv(CALL_LOG_ENV, "logs/calls.jsonl")
    assert CallLog.from_env(tmp_path / "plugin", "n").path == tmp_path / "plugin" / "logs" / "calls.jsonl"
    assert (tmp_path / "plugin" / "logs").is_dir()
    monkeypatch.setenv(CALL_LOG_ENV, str(tmp_path / "elsewhere.jsonl"))
    assert CallLog.from_env(tmp_path / "plugin", "n").path == tmp_path / "elsewhere.jsonl"


def test_concurrent_calls_give_whole_lines_and_a_torn_line_is_skipped(tmp_path) -> None:
    log = CallLog(tmp_path / "calls.jsonl", "node-a")
    claims = [SimpleNamespace(namespace="ns", name=f"claim-{i}" + "x" * 2000, uid=f"u{i}") for i in range(8)]

    def serve(i: int) -> None:
        for _ in range(50):
            log.record("NodePrepareResources", "v1", claims[i:i + 1])

    threads = [threading.Thread(target=serve, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    with open(log.path, "a") as f:
        f.write('{"method": "NodeUnprep')  # a plugin killed mid-write
    calls = parse_calls(log.path.read_text())
    assert len(calls) == 400
    assert {c.claims for c in calls} == {(("ns", c.name, c.uid),) for c in claims}
    assert {(c.method, c.service, c.node) for c in calls} == {("NodePrepareResources", "v1", "node-a")}
