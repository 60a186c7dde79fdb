"""A node whose mode ends :health gets NVIDIA's plugin with gate NVMLDeviceHealthCheck, as the layout key
healthCheck promises (docs/design/health.md, "Conformance checks"); others do not."""

from __future__ import annotations

from pathlib import Path

from fake_gpus.machine.views import MachineViews
from testbed.drivers.nvidia import plugin


def _gates(tmp_path: Path, mode_kind: str, gates: tuple[str, ...] = (), health: bool = False) -> list[str]:
    p = plugin.NodePlugin("n1", tmp_path / "home", MachineViews(tmp_path / "state"))
    argv = plugin.plugin_argv(Path("/bin/plugin"), p, tmp_path / "kubeconfig", mode_kind, gates, health=health)
    return argv[argv.index("--feature-gates") + 1].split(",") if "--feature-gates" in argv else []


def test_health_mode_switches_the_gate_on(tmp_path: Path) -> None:
    assert _gates(tmp_path, "whole", health=True) == [plugin.HEALTH_GATE]
    assert _gates(tmp_path, "static-mig", health=True) == [plugin.HEALTH_GATE]
    assert _gates(tmp_path, "whole") == []


def test_a_gate_named_twice_is_passed_once(tmp_path: Path) -> None:
    # the health suites name the gate themselves; a node of theirs whose mode asks for it too must not repeat it
    assert _gates(tmp_path, "whole", (plugin.HEALTH_GATE,), health=True) == [plugin.HEALTH_GATE]
    assert _gates(tmp_path, "dynamic-mig", ("TimeSlicingSettings=true",)) == ["DynamicMIG=true", "TimeSlicingSettings=true"]
