"""The fabric-attach mode (fake_gpus/driver/fabric_attach.py): its setting, the binding conditions on published
devices, and the controller that attaches allocated devices after the delay (or never, under its fault)."""

from __future__ import annotations

import json

import pytest

from fake_gpus.driver.fabric_attach import (ATTACH_ENV, ATTACH_FAILED, ATTACHED, NEVER_SET, AttachController, AttachSettingError,
                                            attach_delay, waiting_devices, with_binding_conditions)
from fake_gpus.driver.stamping import StampedSlice

DRIVER = "gpu.nvidia.com"


def result(device: str, bound: bool = True, **extra) -> dict:
    r = {"request": "r", "driver": DRIVER, "pool": "n1", "device": device, **extra}
    if bound:
        r.update(bindingConditions=[ATTACHED], bindingFailureConditions=[ATTACH_FAILED])
    return r


def claim(uid: str, results: list[dict], devices: list[dict] | None = None) -> dict:
    return {"metadata": {"namespace": "ns", "name": f"c-{uid}", "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}, "devices": devices or []}}


def test_the_setting_is_seconds_or_off() -> None:
    assert attach_delay({}) is None and attach_delay({ATTACH_ENV: ""}) is None
    assert attach_delay({ATTACH_ENV: "2.5"}) == 2.5
    for bad in ("soon", "-1", "99999"):
        with pytest.raises(AttachSettingError, match="valid: seconds"):
            attach_delay({ATTACH_ENV: bad})


def test_every_published_device_waits_for_the_attach() -> None:
    text = json.dumps({"spec": {"devices": [{"name": "gpu-0"}, {"name": "gpu-1"}]}, "metadata": {"generation": 0}})
    (out,) = with_binding_conditions([StampedSlice("s", text, b"")])
    devices = json.loads(out.text)["spec"]["devices"]
    assert [(d["bindingConditions"], d["bindingFailureConditions"]) for d in devices] == [([ATTACHED], [ATTACH_FAILED])] * 2
    assert out.digest != b""  # a changed slice is written again


def test_only_unattached_devices_of_our_driver_wait() -> None:
    done = [{"driver": DRIVER, "pool": "n1", "device": "gpu-1", "conditions": [{"type": ATTACHED, "status": "True"}]}]
    c = claim("u", [result("gpu-0"), result("gpu-1"), result("gpu-2", bound=False), {**result("gpu-3"), "driver": "x.example.com"}], done)
    assert [r["device"] for r in waiting_devices(c, DRIVER)] == ["gpu-0"]


class Clock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def controller(claims: list[dict], faults: frozenset[str] = frozenset()) -> tuple[AttachController, list, Clock]:
    applied: list = []
    clock = Clock()
    ctl = AttachController(DRIVER, 2.0, lambda: claims, lambda ns, n, body, mgr: applied.append((n, body, mgr)), faults,
                           log=lambda m: None, clock=clock)
    return ctl, applied, clock


def test_a_claim_is_attached_once_the_delay_has_passed() -> None:
    claims = [claim("u1", [result("gpu-0"), result("gpu-1")]), claim("u2", [result("gpu-2", bound=False)])]
    ctl, applied, clock = controller(claims)
    assert ctl.round() == []  # first seen
    clock.now += 1.9
    assert ctl.round() == []
    clock.now += 0.2
    assert ctl.round() == ["u1"]
    name, body, manager = applied[0]
    assert (name, manager) == ("c-u1", f"{DRIVER}/fabric-attach")
    assert body["metadata"]["uid"] == "u1"
    assert [(e["device"], [(c["type"], c["status"]) for c in e["conditions"]]) for e in body["status"]["devices"]] == [
        ("gpu-0", [(ATTACHED, "True")]), ("gpu-1", [(ATTACHED, "True")])]


def test_a_claim_gone_or_attached_is_forgotten() -> None:
    claims = [claim("u1", [result("gpu-0")])]
    ctl, _applied, _clock = controller(claims)
    ctl.round()
    claims.clear()
    ctl.round()
    assert ctl.first_seen == {}


def test_the_fault_never_attaches() -> None:
    ctl, applied, clock = controller([claim("u1", [result("gpu-0")])], frozenset({NEVER_SET}))
    ctl.round()
    clock.now += 60
    assert ctl.round() == [] and applied == []
