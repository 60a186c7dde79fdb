"""The fresh machine's network turns the host's IPv4 forwarding on for its run and off again when it found it off:
a machine that never ran a dockerd has it off, and the fresh machine then reached no registry."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.host import netns as freshnet


def _flag(tmp_path: Path, value: str) -> Path:
    flag = tmp_path / "ip_forward"
    flag.write_text(f"{value}\n")
    return flag


@pytest.mark.parametrize("before", ["0", "1"])
def test_on_during_the_run_and_as_found_after(before: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(freshnet, "_dockerd_here", lambda: False)
    flag = _flag(tmp_path, before)
    with freshnet.forwarding(flag):
        assert flag.read_text().strip() == "1"
    assert flag.read_text().strip() == before


def test_a_dockerd_started_meanwhile_keeps_it_on_also_on_failure(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(freshnet, "_dockerd_here", lambda: True)
    flag = _flag(tmp_path, "0")
    with pytest.raises(RuntimeError), freshnet.forwarding(flag):
        raise RuntimeError("the run failed")
    assert flag.read_text().strip() == "1"

