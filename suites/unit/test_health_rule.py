"""NVIDIA's device-health rule as our driver applies it (fake_gpus/driver/health.py): event -> taint, the
ignore list, one taint per key, and where taints land in a node's slices; each fault switch breaks it."""

from __future__ import annotations

import pytest

from fake_gpus.driver.health import (
    APPLICATION_XIDS, ECC_DOUBLE, ECC_SINGLE, GPU_LOST, NODE, UNMONITORED, XID, HealthEvent, Taint, XidListError,
    apply_taints, gpu_scope, ignored_xids, parse_xid_list, taint_for, with_taint,
)
from fake_gpus.node import Mode, ModeError, NodeHardware, hardware_from_labels, hardware_labels, parse_mode

DRIVER = "gpu.nvidia.com"
IGNORED = ignored_xids()
FATAL_XIDS = (48, 63, 64, 74, 79, 92, 94, 95, 119, 120)  # named by NVIDIA's Xid catalog, not application errors


def test_the_application_xids_are_nvidias_six() -> None:
    assert APPLICATION_XIDS == {13, 31, 43, 45, 68, 109}


@pytest.mark.parametrize("xid", sorted(APPLICATION_XIDS))
def test_an_application_xid_is_published_with_effect_none(xid: int) -> None:
    assert taint_for(HealthEvent(XID, xid), DRIVER, IGNORED) == Taint("gpu.nvidia.com/xid", str(xid), "None")


@pytest.mark.parametrize("xid", FATAL_XIDS)
def test_a_fatal_xid_taints_noschedule_with_the_xid_as_value(xid: int) -> None:
    assert taint_for(HealthEvent(XID, xid), DRIVER, IGNORED).body() == {"key": "gpu.nvidia.com/xid", "value": str(xid), "effect": "NoSchedule"}


def test_additional_xids_to_ignore_take_effect_none_and_bad_entries_are_one_line() -> None:
    ignored = ignored_xids(parse_xid_list(" 48, ,94 "))
    assert taint_for(HealthEvent(XID, 48), DRIVER, ignored).effect == "None"
    assert taint_for(HealthEvent(XID, 79), DRIVER, ignored).effect == "NoSchedule"
    with pytest.raises(XidListError, match=r"^additional Xid to ignore 'x9' is not a whole number; valid: .*$"):
        parse_xid_list("48,x9")


@pytest.mark.parametrize("kind", [ECC_SINGLE, ECC_DOUBLE])
def test_ecc_events_taint_nothing_as_in_nvidias_driver(kind: str) -> None:
    assert taint_for(HealthEvent(kind), DRIVER, IGNORED) is None


def test_lost_and_unmonitored() -> None:
    assert taint_for(HealthEvent(GPU_LOST), DRIVER, IGNORED).body() == {"key": "gpu.nvidia.com/gpu-lost", "effect": "NoSchedule"}
    assert taint_for(HealthEvent(UNMONITORED), DRIVER, IGNORED).body() == {"key": "gpu.nvidia.com/unmonitored", "effect": "None"}


def test_a_later_xid_replaces_the_earlier_one() -> None:
    first = with_taint((), taint_for(HealthEvent(XID, 79), DRIVER, IGNORED))
    later = with_taint(first, taint_for(HealthEvent(XID, 13), DRIVER, IGNORED))
    assert later == (Taint("gpu.nvidia.com/xid", "13", "None"),)
    lost = with_taint(later, taint_for(HealthEvent(GPU_LOST), DRIVER, IGNORED))
    assert [t.key for t in lost] == ["gpu.nvidia.com/xid", "gpu.nvidia.com/gpu-lost"]


def _slice(*devices: dict) -> dict:
    return {"spec": {"devices": list(devices)}}


WHOLE = {"name": "gpu-0", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-a"}}}
OTHER = {"name": "gpu-1", "attributes": {"type": {"string": "gpu"}, "uuid": {"string": "GPU-b"}}}
MIG = {"name": "gpu-1-mig-1g10gb-19-0", "attributes": {"type": {"string": "mig"}, "parentUUID": {"string": "GPU-b"}}}


def test_taints_land_by_scope_node_gpu_and_device() -> None:
    xid = Taint("gpu.nvidia.com/xid", "79", "NoSchedule")
    lost = Taint("gpu.nvidia.com/gpu-lost", None, "NoSchedule")
    body = apply_taints([_slice(dict(WHOLE), dict(OTHER), dict(MIG))], DRIVER,
                        {"gpu-0": (xid,), gpu_scope("GPU-b"): (Taint("gpu.nvidia.com/unmonitored", None, "None"),)})
    devices = body[0]["spec"]["devices"]
    assert devices[0]["taints"] == [xid.body()]
    assert devices[1]["taints"] == devices[2]["taints"] == [{"key": "gpu.nvidia.com/unmonitored", "effect": "None"}]
    everywhere = apply_taints([_slice(dict(WHOLE), dict(MIG))], DRIVER, {NODE: (lost,)})
    assert all(d["taints"] == [lost.body()] for d in everywhere[0]["spec"]["devices"])


def test_fault_switches_break_the_rule() -> None:
    assert taint_for(HealthEvent(XID, 79), DRIVER, IGNORED, frozenset({"taint-wrong-effect"})).effect == "None"
    assert taint_for(HealthEvent(XID, 13), DRIVER, ignored_xids(faults=frozenset({"ignored-xids-wrong"}))).effect == "NoSchedule"
    xid = Taint("gpu.nvidia.com/xid", "79", "NoSchedule")
    untouched = apply_taints([_slice(dict(WHOLE))], DRIVER, {"gpu-0": (xid,)}, frozenset({"taint-never-published"}))
    assert "taints" not in untouched[0]["spec"]["devices"][0]


@pytest.mark.parametrize("text", ["whole:health", "static-mig:all-1g.10gb:health", "dynamic-mig:shares=memory:health"])
def test_health_rides_on_the_mode_text_and_the_node_labels(text: str) -> None:
    mode = parse_mode(text)
    assert mode.health and str(mode) == text
    hardware = NodeHardware("h100-80gb", 2, mode)
    assert hardware_labels(hardware)["dra-testbed.io/health-check"] == "true"
    assert hardware_from_labels(hardware_labels(hardware)) == hardware
    assert "dra-testbed.io/health-check" not in hardware_labels(NodeHardware("h100-80gb", 2, Mode("whole")))


def test_bad_health_label_and_mode_are_one_line() -> None:
    labels = {**hardware_labels(NodeHardware("h100-80gb", 2)), "dra-testbed.io/health-check": "yes"}
    with pytest.raises(ValueError, match=r"^label dra-testbed.io/health-check='yes' is not valid; valid: true, false$"):
        hardware_from_labels(labels)
    with pytest.raises(ModeError, match=r"then maybe :health$"):
        parse_mode("whole:healthy")


def test_effect_none_is_left_out_where_the_api_refuses_it() -> None:
    ignored = Taint("gpu.nvidia.com/xid", "13", "None")
    lost = Taint("gpu.nvidia.com/gpu-lost", None, "NoSchedule")
    [body] = apply_taints([_slice(dict(WHOLE), dict(OTHER))], DRIVER, {"gpu-0": (ignored, lost), "gpu-1": (ignored,)}, effect_none=False)
    assert body["spec"]["devices"][0]["taints"] == [lost.body()]
    assert "taints" not in body["spec"]["devices"][1]


def _layout(tmp_path, **entry: object):
    import yaml

    from testbed.clusters.layout import load_layout
    file = tmp_path / "layout.yaml"
    file.write_text(yaml.safe_dump({"nodes": [{"name": "a", "board": "h100-80gb", "count": 2, **entry}]}))
    return load_layout(file).nodes[0]


def test_layout_key_health_check_and_node_flag(tmp_path) -> None:
    from testbed.clusters.layout import parse_node_flag
    assert _layout(tmp_path, healthCheck=True, consumableShares="memory").mode == Mode("whole", shares="memory", health=True)
    assert _layout(tmp_path, mode="dynamic-mig:health", healthCheck=True).mode == Mode("dynamic-mig", health=True)
    assert not _layout(tmp_path, healthCheck=False).mode.health
    assert parse_node_flag("a=h100-80gb:2:static-mig:all-balanced:health").mode == Mode("static-mig", "all-balanced", health=True)


@pytest.mark.parametrize("entry, message", [
    ({"healthCheck": "yes"}, "healthCheck 'yes' is not valid; valid: true, false"),
    ({"healthCheck": False, "mode": "whole:health"}, "healthCheck false and a mode ending :health disagree; give one"),
])
def test_layout_key_health_check_errors_are_one_line(tmp_path, entry: dict, message: str) -> None:
    from testbed.clusters.layout import LayoutError
    with pytest.raises(LayoutError) as err:
        _layout(tmp_path, **entry)
    assert message in str(err.value) and "\n" not in str(err.value)


def test_taints_keep_the_order_their_keys_came_in() -> None:
    xid, lost = Taint("gpu.nvidia.com/xid", "79", "NoSchedule", order=1), Taint("gpu.nvidia.com/gpu-lost", None, "NoSchedule", order=2)
    [body] = apply_taints([_slice(dict(WHOLE))], DRIVER, {NODE: (lost,), "gpu-0": (with_taint((xid,), Taint(xid.key, "48", "NoSchedule")))})
    assert body["spec"]["devices"][0]["taints"] == [{"key": xid.key, "value": "48", "effect": "NoSchedule"}, lost.body()]
