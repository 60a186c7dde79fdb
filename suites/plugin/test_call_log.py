"""The plugin's opt-in call log ($FAKE_GPUS_PLUGIN_CALL_LOG): every call a kubelet makes, one JSON line
each, in the order served; nothing for the plugin's own readiness calls; no file when it is off."""

from __future__ import annotations

import socket
import time
import urllib.request

from conftest import NODE
from fake_gpus.driver.kubeletplugin.calllog import CALL_LOG_ENV, parse_calls
from fake_gpus.driver.readiness import PATH

MIG_1G = "gpu-1-mig-1g10gb-19-0"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_each_call_is_logged_with_its_service_and_claims(start_plugin, state_dir, kubelet, make_claim) -> None:
    port = _free_port()
    before = time.monotonic()
    plugin = start_plugin(state_dir, env={CALL_LOG_ENV: "calls.jsonl"}, args=["--ready-port", str(port)])
    k = kubelet(plugin)
    k.get_info()
    k.notify_registered(True)
    urllib.request.urlopen(f"http://127.0.0.1:{port}{PATH}", timeout=10).read()  # the plugin's own GetInfo
    first, second = make_claim([MIG_1G]), make_claim(["gpu-0"])
    k.prepare([first, second])
    k.unprepare([second, first], version="v1beta1")
    stream = k.watch_health()
    next(stream)
    stream.cancel()
    calls = parse_calls((plugin.plugin_dir / "calls.jsonl").read_text())  # relative: inside the plugin directory
    ids = [(c.namespace, c.name, c.uid) for c in (first, second)]
    assert [(c.method, c.service, c.claims, c.registered) for c in calls] == [
        ("GetInfo", "registration", (), None),
        ("NotifyRegistrationStatus", "registration", (), True),
        ("NodePrepareResources", "v1", tuple(ids), None),
        ("NodeUnprepareResources", "v1beta1", tuple(reversed(ids)), None),
        ("NodeWatchResources", "v1alpha1", (), None)]
    assert {c.node for c in calls} == {NODE}
    times = [c.t for c in calls]
    assert times == sorted(times) and before < times[0] < time.monotonic()  # the host's monotonic clock


def test_no_log_unless_asked(start_plugin, state_dir, kubelet, make_claim) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    k.get_info()
    claim = make_claim(["gpu-0"])
    k.prepare([claim])
    k.unprepare([claim])
    assert sorted(p.name for p in plugin.plugin_dir.iterdir()) == ["checkpoint.json", "dra.sock"]
