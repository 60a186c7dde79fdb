"""testbed/drivers/nvidia/health.py's pure parts: the normalized taints a comparison reads, and the injection
steps it refuses. The live side is suites/nvidia/test_nvidia_health.py."""

from __future__ import annotations

import pytest

from testbed.drivers.nvidia.health import Injection, device_taints, tainted


def _slice(*devices: dict) -> dict:
    return {"spec": {"devices": list(devices)}}


def test_taints_are_sorted_key_value_effect_without_time_added() -> None:
    pool = [_slice({"name": "gpu-0", "taints": [
                {"key": "gpu.nvidia.com/xid", "value": "79", "effect": "NoSchedule", "timeAdded": "2026-12-07T20:00:00Z"},
                {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule", "timeAdded": "2026-12-07T20:00:01Z"}]},
                   {"name": "gpu-1"}),
            _slice({"name": "gpu-2", "taints": []})]
    got = device_taints(pool)
    assert got == {"gpu-0": [("gpu.nvidia.com/gpu-lost", "", "NoSchedule"), ("gpu.nvidia.com/xid", "79", "NoSchedule")],
                   "gpu-1": [], "gpu-2": []}
    assert tainted(got) == {"gpu-0": got["gpu-0"]}


@pytest.mark.parametrize("kind, xid, says", [("xid", 0, "an Xid number goes with kind 'xid' only"),
                                             ("lost", 79, "an Xid number goes with kind 'xid' only"),
                                             ("reboot", 0, "injection kind 'reboot'; valid: xid, ecc-single")])
def test_a_malformed_step_is_refused_in_one_line(kind: str, xid: int, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        Injection(kind, 0, xid)

