"""The plugin's health stream (dra-health/v1alpha1) against a real plugin process, with GPU faults injected
by another process into the node's fake NVML: a fatal Xid makes its GPU's devices (MIG devices included)
UNHEALTHY and a heal (the GPU reset) HEALTHY again; a lost GPU makes every device of the node UNHEALTHY
until it is back. The node asks for health checks (label dra-testbed.io/health-check), as our taints do."""

from __future__ import annotations

import subprocess
import sys
import time
from typing import Callable, Iterator

import pytest
from kubernetes import client

from conftest import NODE, ApiServer
from fake_gpus.driver.kubeletplugin.health_stream import ALWAYS_HEALTHY_FAULT
from fake_gpus.node import HEALTH_LABEL

pytestmark = pytest.mark.cluster

CHANGE_BOUND_S = 5.0  # monitor wait 0.2 s + stream poll 0.2 s (+ a loaded machine): later than this is a bug
INJECT = "import sys; from fake_gpus.nvml import health; health.append(sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4]))"
MIG_OF_1, MIG_OF_0 = "gpu-1-mig-7g80gb-0-0", "gpu-0-mig-7g80gb-0-0"


@pytest.fixture
def health_checked(apiserver: ApiServer) -> Iterator[None]:
    """The plugin's node asks for health checks while the test runs."""
    core = client.CoreV1Api(apiserver.api)
    core.patch_node(NODE, {"metadata": {"labels": {HEALTH_LABEL: "true"}}})
    yield
    core.patch_node(NODE, {"metadata": {"labels": {HEALTH_LABEL: None}}})


def _inject(state_dir, gpu: int, kind: str, data: int = 0) -> None:
    """A fault record appended by a process of its own, as `dra-testbed gpu fail|heal` does."""
    subprocess.run([sys.executable, "-c", INJECT, str(state_dir), str(gpu), kind, str(data)], check=True, timeout=60)


def _view(message, protos) -> dict[str, str]:
    return {d.device.device_name: protos.health.HealthStatus.Name(d.health) for d in message.devices}


def _until(stream, protos, what: str, wanted: Callable[[dict[str, str]], bool], bound: float = CHANGE_BOUND_S) -> dict[str, str]:
    """The first message (the stream sends at least every --health-interval) whose view satisfies `wanted`."""
    deadline = time.monotonic() + bound
    view: dict[str, str] = {}
    while time.monotonic() < deadline:
        view = _view(next(stream), protos)
        if wanted(view):
            return view
    raise AssertionError(f"{what}: not within {bound} s; last sent: {view}")


def check_health_follows_faults(plugin, kubelet, protos, state_dir) -> None:
    stream = kubelet(plugin).watch_health(timeout=120)
    try:
        first = _until(stream, protos, "every device reported", lambda v: {"gpu-0", "gpu-1", MIG_OF_1} <= v.keys(), bound=30)
        assert set(first.values()) == {"HEALTHY"}, first

        _inject(state_dir, 1, "xid", 79)  # fatal: its GPU's devices, the MIG ones too
        view = _until(stream, protos, "gpu-1 UNHEALTHY after Xid 79", lambda v: v["gpu-1"] == "UNHEALTHY")
        assert view[MIG_OF_1] == "UNHEALTHY" and view["gpu-0"] == view[MIG_OF_0] == "HEALTHY", view
        _inject(state_dir, 1, "heal")
        view = _until(stream, protos, "gpu-1 HEALTHY after its reset", lambda v: v["gpu-1"] == "HEALTHY")
        assert set(view.values()) == {"HEALTHY"}, view

        _inject(state_dir, 0, "xid", 13)  # an application error: the GPU stays healthy
        _inject(state_dir, 0, "lost")  # NVIDIA's rule: a lost GPU makes every device of the node unhealthy
        view = _until(stream, protos, "every device UNHEALTHY after a lost GPU", lambda v: set(v.values()) == {"UNHEALTHY"})
        assert {"gpu-0", "gpu-1", MIG_OF_0, MIG_OF_1} <= view.keys(), "a lost GPU's devices must stay in the stream"
        _inject(state_dir, 0, "heal")
        _until(stream, protos, "every device HEALTHY once the GPU is back", lambda v: set(v.values()) == {"HEALTHY"})
    finally:
        stream.cancel()


def test_health_stream_follows_failed_and_healed_gpus(health_checked, start_plugin, state_dir, kubelet, protos) -> None:
    check_health_follows_faults(start_plugin(state_dir), kubelet, protos, state_dir)


def test_health_stream_check_fails_when_the_stream_is_always_healthy(health_checked, start_plugin, state_dir, kubelet, protos) -> None:
    with pytest.raises(AssertionError, match="UNHEALTHY after Xid 79"):
        check_health_follows_faults(start_plugin(state_dir, faults=[ALWAYS_HEALTHY_FAULT]), kubelet, protos, state_dir)


def test_health_stream_of_an_unchecked_node_stays_healthy(start_plugin, state_dir, kubelet, protos) -> None:
    """No health checks on the node: no monitor and no taints, so no failure is reported (as before)."""
    stream = kubelet(start_plugin(state_dir)).watch_health(timeout=60)
    try:
        _until(stream, protos, "every device reported", lambda v: "gpu-1" in v, bound=30)
        _inject(state_dir, 1, "xid", 79)
        time.sleep(1.0)
        view = _view(next(stream), protos)
        assert set(view.values()) == {"HEALTHY"}, view
    finally:
        stream.cancel()
