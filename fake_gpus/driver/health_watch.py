"""The publisher's side of device health: one health monitor process per node that asks for it, and the
taints each last reported (fake_gpus.driver.health_monitor writes them, one JSON line per change).

A node asks for monitoring with its mode's `health` (label dra-testbed.io/health-check, as NVIDIA's
NVMLDeviceHealthCheck gate is set per driver deployment, here per node pool). Reports arrive on reader
threads; `changed()` hands the publisher's loop the nodes whose taints changed, to be published again.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from fake_gpus.driver.health import Taint, apply_taints
from fake_gpus.driver.nvml_adapter import NodeInventory
from fake_gpus.driver.stamping import StampedSlice
from fake_gpus.node import Mode

# NVIDIA's plugin takes its extra ignored Xids from this variable too (--additional-xids-to-ignore)
ADDITIONAL_XIDS_ENV = "ADDITIONAL_XIDS_TO_IGNORE"
# how long a node's first publish waits for its new monitor to register its events (a Python start on a
# loaded machine); past it the node is published anyway, unwatched until the monitor reports
REGISTER_TIMEOUT_S = 15.0


def library_dir_of(nvml) -> Path | None:
    """The directory of the libnvidia-ml.so.1 an NvmlLibrary loaded (None: the loader's default), for the
    monitors to load the same one."""
    name = getattr(getattr(nvml, "_lib", None), "_name", None)
    return Path(name).parent if name else None


def tainted(stamped: list[StampedSlice], driver: str, taints: Mapping[str, tuple[Taint, ...]],
            faults: frozenset[str] = frozenset(), effect_none: bool = True) -> list[StampedSlice]:
    """A node's stamped slices with its devices' taints on them (unchanged when it has none);
    `effect_none`: whether the served API takes taints of effect None."""
    if not taints:
        return stamped
    bodies = apply_taints([json.loads(s.text) for s in stamped], driver, taints, faults, effect_none)
    texts = [json.dumps(b, separators=(",", ":")) for b in bodies]
    return [StampedSlice(s.name, t, hashlib.blake2b(t.encode(), digest_size=16).digest()) for s, t in zip(stamped, texts)]


@dataclass
class _Watched:
    process: subprocess.Popen
    mode: Mode
    taints: dict[str, tuple[Taint, ...]]
    inventory: NodeInventory | None = None  # the node as NVML last answered for all its GPUs
    reported: bool = False  # its monitor has registered its events and said so
    first_report: threading.Event = field(default_factory=threading.Event)


class HealthWatch:
    """Health monitors by node, started and stopped as nodes come, change mode or go."""

    def __init__(self, nvml_lib_dir: Path | None, driver: str, additional_xids: str = "") -> None:
        self.nvml_lib_dir, self.driver, self.additional_xids = nvml_lib_dir, driver, additional_xids
        self.watched: dict[str, _Watched] = {}
        self._changed: set[str] = set()
        self._lock = threading.Lock()

    def follow(self, node: str, mode: Mode, state_dir: Path) -> None:
        """Monitor `node` when its mode asks for health checks (restarted when its mode changed); stop
        monitoring it otherwise."""
        known = self.watched.get(node)
        if known is not None and known.mode == mode and known.process.poll() is None:
            return
        self.forget(node)
        if not mode.health or self.nvml_lib_dir is None:
            return
        process = subprocess.Popen(
            [sys.executable, "-m", "fake_gpus.driver.health_monitor", "--state-dir", str(state_dir),
             "--nvml-lib-dir", str(self.nvml_lib_dir), "--mode", str(mode), "--driver", self.driver,
             "--additional-xids-to-ignore", self.additional_xids],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=os.environ.copy())
        watched = _Watched(process, mode, {})
        self.watched[node] = watched
        threading.Thread(target=self._read, args=(node, watched), daemon=True).start()

    def _read(self, node: str, watched: _Watched) -> None:
        for line in watched.process.stdout:
            try:
                report = json.loads(line)["taints"]
            except (ValueError, KeyError, TypeError):
                continue
            taints = {scope: tuple(Taint(t["key"], t.get("value"), t["effect"], t.get("order", 0)) for t in items)
                          for scope, items in report.items()}
            with self._lock:
                watched.taints, watched.reported = taints, True
                if self.watched.get(node) is watched:
                    self._changed.add(node)
            watched.first_report.set()
        watched.first_report.set()  # a monitor that ended without a report: nobody waits for it any longer

    def wait_reported(self, node: str, timeout: float = REGISTER_TIMEOUT_S) -> bool:
        """Wait until `node`'s monitor has registered its events (True at once for a node not monitored): a
        device published before that could fail unseen, its fault reaching no event set."""
        watched = self.watched.get(node)
        return watched is None or watched.first_report.wait(timeout)

    def reported(self, node: str) -> bool:
        """Whether `node`'s monitor has registered its events (a fault from before that never reaches it)."""
        watched = self.watched.get(node)
        return watched is not None and watched.reported

    def taints(self, node: str) -> dict[str, tuple[Taint, ...]]:
        """The node's taints by scope, as its monitor last reported them ({} when not monitored)."""
        watched = self.watched.get(node)
        with self._lock:
            return dict(watched.taints) if watched else {}

    def remember(self, node: str, inventory: NodeInventory) -> NodeInventory:
        """Keep a monitored node's inventory: once a GPU is lost NVML answers nothing for it, while its
        devices stay published, tainted (as NVIDIA's driver keeps its device list from start-up)."""
        watched = self.watched.get(node)
        if watched is not None:
            watched.inventory = inventory
        return inventory

    def last_inventory(self, node: str) -> NodeInventory | None:
        """The monitored node's last complete inventory (None: not monitored or never read)."""
        watched = self.watched.get(node)
        return watched.inventory if watched else None

    def changed(self) -> set[str]:
        """Nodes whose taints changed since the last call."""
        with self._lock:
            found, self._changed = self._changed, set()
        return found

    def forget(self, node: str) -> None:
        """Stop monitoring `node`: closing its monitor's standard input ends it."""
        watched = self.watched.pop(node, None)
        if watched is None:
            return
        try:
            watched.process.stdin.close()
            watched.process.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            watched.process.kill()
            watched.process.wait()

    def close(self) -> None:
        for node in list(self.watched):
            self.forget(node)
