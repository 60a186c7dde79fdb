"""One node's device-health monitor: NVML events -> the node's device taints, as NVIDIA's driver derives them.

    python -m fake_gpus.driver.health_monitor --state-dir DIR --nvml-lib-dir DIR --mode MODE
        [--driver NAME] [--additional-xids-to-ignore LIST]

A process of its own per node (NVML is process-global and the publisher switches its one library between
nodes, while an event set lives as long as one NVML session). It registers Xid and ECC events on every GPU
(a GPU that refuses: `unmonitored` on its devices), waits on the set and prints the node's taints whole, one
JSON line `{"taints": {scope: [taint, ...]}}` per change (scopes: fake_gpus.driver.health). It ends when its
standard input closes, so it never outlives the publisher that started it.

Beyond NVIDIA's driver, which never lifts a taint: a `gpu-lost` taint goes once every GPU answers NVML
again, and a GPU's `xid` taint once the GPU was reset (NVML's recovery action, NVML_FI_DEV_GET_GPU_RECOVERY_ACTION,
went from a pending action back to none); on dynamic-MIG nodes, which NVIDIA's driver refuses to monitor,
a GPU-wide Xid taints every device of that GPU (its full GPU and every MIG placement).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pynvml

from fake_gpus.driver.faults import active_faults
from fake_gpus.driver.health import (
    GPU_LOST, NODE, UNMONITORED, XID, HealthEvent, Taint, XidListError, gpu_scope, ignored_xids, parse_xid_list,
    taint_for, with_taint,
)
from fake_gpus.driver.identity import current_identity, gpu_device_name, mig_device_name
from fake_gpus.driver.nvml_adapter import Nvml, load_library
from fake_gpus.node import ModeError, parse_mode

NO_INSTANCE = 0xFFFFFFFF  # gpuInstanceId / computeInstanceId of an event that names no MIG instance
WAIT_MS = 200  # one wait on the event set; between waits, lost GPUs and resets are looked at
# the events NVIDIA's health monitor registers (device_health.go registerEventsForDevices)
EVENT_MASK = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeSingleBitEccError | pynvml.nvmlEventTypeDoubleBitEccError


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def recovery_action(handle) -> int | None:
    """NVML's recovery action for the GPU (NVML_GPU_RECOVERY_ACTION_*), None where NVML does not say."""
    try:
        [field] = pynvml.nvmlDeviceGetFieldValues(handle, [pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION])
    except pynvml.NVMLError:
        return None
    return field.value.uiVal if field.nvmlReturn == pynvml.NVML_SUCCESS else None


class Monitor:
    """The health of one node's GPUs, as taints by scope."""

    def __init__(self, driver: str, ignored: frozenset[int], dynamic: bool, faults: frozenset[str]) -> None:
        self.driver, self.ignored, self.dynamic, self.faults = driver, ignored, dynamic, faults
        self.nvml = Nvml.open()
        self.taints: dict[str, tuple[Taint, ...]] = {}
        self.arrivals = 0  # taints added so far: their order on a device
        self.uuids: list[str] = []  # by NVML index
        self.pending_reset: set[str] = set()  # GPUs whose recovery action was seen pending
        self.events = pynvml.nvmlEventSetCreate()
        for index in range(self.nvml.gpu_count()):
            self._register(index)

    def _add(self, scope: str, event: HealthEvent) -> None:
        taint = taint_for(event, self.driver, self.ignored, self.faults)
        if taint is not None:
            self.arrivals += 1
            self.taints[scope] = with_taint(self.taints.get(scope, ()), replace(taint, order=self.arrivals))

    def _drop(self, scope: str, key: str) -> None:
        kept = tuple(t for t in self.taints.get(scope, ()) if t.key != key)
        if kept:
            self.taints[scope] = kept
        else:
            self.taints.pop(scope, None)

    def _register(self, index: int) -> None:
        """Register the GPU's health events; any refusal marks its devices unmonitored (NVIDIA's rule)."""
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        except pynvml.NVMLError:
            self.uuids.append("")  # NVML names no GPU here: nothing to mark
            return
        self.uuids.append(uuid)
        try:
            supported = pynvml.nvmlDeviceGetSupportedEventTypes(handle)
            pynvml.nvmlDeviceRegisterEvents(handle, EVENT_MASK & supported, self.events)
        except pynvml.NVMLError:
            self._add(gpu_scope(uuid), HealthEvent(UNMONITORED))

    def _xid_scope(self, handle, gi: int, ci: int) -> str | None:
        """Where an Xid lands: the whole GPU's device, or the MIG device the instance ids name (by its
        profile and placement); on dynamic-MIG nodes a GPU-wide Xid lands on every device of the GPU."""
        minor = pynvml.nvmlDeviceGetMinorNumber(handle)
        if gi == NO_INSTANCE:
            return gpu_scope(_text(pynvml.nvmlDeviceGetUUID(handle))) if self.dynamic else gpu_device_name(minor)
        for mig in self.nvml.instances(handle):
            if (mig.gi_id, mig.ci_id) == (gi, ci):
                profile = next((p for p in self.nvml.profiles(handle) if p.id == mig.profile_id), None)
                return mig_device_name(minor, profile.name, profile.id, mig.start) if profile else None
        return None  # an instance no device of ours stands for: ignored, as NVIDIA's driver does

    def wait(self, timeout_ms: int = WAIT_MS) -> None:
        """Take the next event, if one comes within `timeout_ms`, then look for GPUs back or reset."""
        try:
            data = pynvml.nvmlEventSetWait_v2(self.events, timeout_ms)
        except pynvml.NVMLError_Timeout:
            data = None
        except pynvml.NVMLError_GpuIsLost:  # NVIDIA's driver: every device of the node
            self._add(NODE, HealthEvent(GPU_LOST))
            data = None
        except pynvml.NVMLError:
            data = None  # other wait errors are retried, as NVIDIA's driver does
        if data is not None and data.eventType == pynvml.nvmlEventTypeXidCriticalError:
            try:
                scope = self._xid_scope(data.device, data.gpuInstanceId, data.computeInstanceId)
                uuid = _text(pynvml.nvmlDeviceGetUUID(data.device))
            except pynvml.NVMLError:  # NVIDIA's driver: a device it cannot name taints everything lost
                self._add(NODE, HealthEvent(GPU_LOST))
            else:
                if scope is not None:
                    self._add(scope, HealthEvent(XID, int(data.eventData)))
                    if recovery_action(data.device):
                        self.pending_reset.add(uuid)
        self._heal()

    def _heal(self) -> None:
        if "taint-never-removed" in self.faults:
            return
        if any(t.key.endswith(f"/{GPU_LOST}") for t in self.taints.get(NODE, ())):
            try:
                for index in range(len(self.uuids)):
                    pynvml.nvmlDeviceGetHandleByIndex(index)
            except pynvml.NVMLError:
                return
            self._drop(NODE, f"{self.driver}/{GPU_LOST}")
        for uuid in list(self.pending_reset):
            action = recovery_action(pynvml.nvmlDeviceGetHandleByUUID(uuid))
            if action == pynvml.NVML_GPU_RECOVERY_ACTION_NONE:  # reset: the GPU is as new
                self.pending_reset.discard(uuid)
                self._heal_gpu(uuid)

    def _heal_gpu(self, uuid: str) -> None:
        """Drop the Xid taints of every device of the GPU with `uuid`."""
        handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
        minor = pynvml.nvmlDeviceGetMinorNumber(handle)
        prefix = gpu_device_name(minor)
        for scope in [s for s in self.taints if s == gpu_scope(uuid) or s == prefix or s.startswith(f"{prefix}-mig-")]:
            self._drop(scope, f"{self.driver}/{XID}")

    def report(self) -> str:
        return json.dumps({"taints": {scope: [{**t.body(), "order": t.order} for t in taints]
                                      for scope, taints in sorted(self.taints.items())}}, sort_keys=True)


def _until_closed(stop: threading.Event) -> None:
    """Set `stop` once standard input closes (the publisher went or let go of this node)."""
    while os.read(0, 4096):
        pass
    stop.set()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fake_gpus.driver.health_monitor", description=__doc__.splitlines()[0])
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--nvml-lib-dir", required=True, type=Path)
    parser.add_argument("--mode", required=True, help="the node's mode (fake_gpus.node), e.g. whole or dynamic-mig")
    parser.add_argument("--driver", default=None, help="the driver name (default: this process's driver identity)")
    parser.add_argument("--additional-xids-to-ignore", default="", help="comma-separated Xids whose taints take effect None")
    args = parser.parse_args(argv)
    try:
        mode = parse_mode(args.mode)
        ignored = ignored_xids(parse_xid_list(args.additional_xids_to_ignore), active_faults())
    except (ModeError, XidListError) as exc:
        print(f"health-monitor: {exc}", file=sys.stderr)
        return 2
    load_library(args.nvml_lib_dir, args.state_dir)
    stop = threading.Event()
    threading.Thread(target=_until_closed, args=(stop,), daemon=True).start()
    monitor = Monitor(args.driver or current_identity().driver, ignored, mode.kind == "dynamic-mig", active_faults())
    last = None
    while not stop.is_set():
        text = monitor.report()
        if text != last:
            print(text, flush=True)
            last = text
        monitor.wait()
    return 0


if __name__ == "__main__":
    sys.exit(main())
