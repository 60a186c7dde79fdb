"""The kubelet plugin's device health (KEP-4680's dra-health/v1alpha1 stream), judged as our taints judge it.

The one source of truth is the node's health monitor (fake_gpus.driver.health_monitor, run through
health_watch.HealthWatch, as the publisher runs it for its taints): a device is unhealthy while the taints
the monitor gives it (health.device_taints: the node's, its GPU's and its own) include one that keeps claims
off it (NoSchedule or NoExecute). So a lost GPU (every device of the node, NVIDIA's rule) or a fatal Xid (its
GPU's device, or its MIG device; every device of the GPU on dynamic-MIG nodes) is unhealthy until the GPU is
back or reset; an application Xid (effect None) and ECC events (no taint) leave the device healthy.

A node whose mode does not ask for health checks (no `:health`, label dra-testbed.io/health-check) has no
monitor, as it has no taints: its devices are reported healthy, as before. The monitor itself is
event-driven (an NVML event set); its last report is read here every POLL_S, in memory, so a change reaches
the stream within POLL_S of the monitor's report. The device list (NVML calls, serialised on a plugin host)
is read only every `refresh_s`, and kept across a lost GPU, whose devices NVML no longer lists.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Callable, Mapping

import pynvml

from fake_gpus.driver.health import NO_EXECUTE, NO_SCHEDULE, Taint, device_taints
from fake_gpus.driver.health_watch import HealthWatch
from fake_gpus.driver.kubeletplugin import MIG_DYNAMIC
from fake_gpus.driver.kubeletplugin.driver import Driver
from fake_gpus.driver.nvml_adapter import DeviceError
from fake_gpus.node import Mode

POLL_S = 0.2  # how often a monitored node's stream compares health with what it last sent
UNHEALTHY_EFFECTS = frozenset({NO_SCHEDULE, NO_EXECUTE})  # taints that keep claims off (or evict): a failed device
ALWAYS_HEALTHY_FAULT = "health-stream-always-healthy"
MIG_INFIX = "-mig-"  # a MIG device is named <its GPU's device>-mig-... (identity.mig_device_name)

Inventory = list[tuple[str, str]]  # (device name, UUID of its GPU), in NVML's order


def driver_inventory(driver: Driver) -> Inventory:
    """The plugin driver's devices now, each with its GPU's UUID (pynvml.NVMLError while a GPU is lost)."""
    with driver.lock, driver.session():
        nvml, dynamic = driver.nvml, driver.settings.mig_mode == MIG_DYNAMIC
        return [(name, nvml.gpu_uuid(minor)) for minor in nvml.minors() for name in nvml.device_names(minor, dynamic)]


def _fatal(device: str, gpu_uuid: str, taints: Mapping[str, tuple[Taint, ...]]) -> bool:
    # device_taints reads a published device; the two attributes it looks at are enough to place this one
    mig = MIG_INFIX in device
    published = {"name": device, "attributes": {"parentUUID": {"string": gpu_uuid}, "type": {"string": "mig"}} if mig
                 else {"uuid": {"string": gpu_uuid}}}
    return any(t.effect in UNHEALTHY_EFFECTS for t in device_taints(published, "", taints))


def is_unhealthy(device: str, gpu_uuid: str, taints: Mapping[str, tuple[Taint, ...]]) -> bool:
    """Whether `device` of the GPU `gpu_uuid` carries a taint that keeps claims off it, or is a MIG device of a
    GPU whose whole-GPU device does: a GPU-wide Xid taints only the full GPU's device on whole and static-MIG
    nodes (NVIDIA's rule, for scheduling), but every instance of that GPU is as broken."""
    whole = device.split(MIG_INFIX, 1)[0]
    return _fatal(device, gpu_uuid, taints) or (whole != device and _fatal(whole, gpu_uuid, taints))


class DeviceHealthSource:
    """One node's devices and their health, for every health stream of its plugin."""

    def __init__(self, node: str, mode: Mode | None, state_dir: Path | None, nvml_lib_dir: Path | None,
                 inventory: Callable[[], Inventory], faults: frozenset[str] = frozenset(), refresh_s: float = 10.0) -> None:
        self.node, self.inventory, self.faults, self.refresh_s = node, inventory, faults, refresh_s
        self._devices: dict[str, str] = {}  # device name -> GPU UUID, every device seen so far
        self._read_at = float("-inf")
        self._lock = threading.Lock()
        self._watch: HealthWatch | None = None
        if mode is not None and mode.health and state_dir is not None and nvml_lib_dir is not None:
            self._watch = HealthWatch(nvml_lib_dir, "")
            self._watch.follow(node, mode, state_dir)

    @property
    def monitored(self) -> bool:
        return self._watch is not None

    def devices(self) -> dict[str, str]:
        """Device name -> its GPU's UUID, read again when `refresh_s` passed; a device once seen stays (a lost
        GPU's devices keep their place, as the kubelet keeps their claims)."""
        with self._lock:
            if time.monotonic() - self._read_at >= self.refresh_s:
                try:
                    for name, uuid in self.inventory():
                        self._devices[name] = uuid
                except (pynvml.NVMLError, DeviceError):
                    pass  # a GPU lost: NVML answers nothing for it; the devices known stay
                self._read_at = time.monotonic()
            return dict(self._devices)

    def health(self) -> list[tuple[str, bool]]:
        """(device, healthy) for every device of the node, in the order first seen."""
        devices = self.devices()
        if self._watch is None or ALWAYS_HEALTHY_FAULT in self.faults:
            return [(name, True) for name in devices]
        self._watch.wait_reported(self.node)
        taints = self._watch.taints(self.node)
        return [(name, not is_unhealthy(name, uuid, taints)) for name, uuid in devices.items()]

    def close(self) -> None:
        if self._watch is not None:
            self._watch.close()
            self._watch = None
