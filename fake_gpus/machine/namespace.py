"""Run a plain process with a node's views in place: a private mount namespace per process.

`unshare -m` gives the process its own mount table (propagation private, so nothing reaches the
host); inside it the node's views are bind-mounted over /proc/driver, /sys/bus/pci and /sys/devices
(the real /sys/devices/system is carried along so CPU topology stays readable), then the command is
exec'd under the same pid. The mounts exist only in that namespace: they go when the process exits,
however it exits, and nothing needs unmounting.
"""

from __future__ import annotations

import os
import shlex
import shutil
from pathlib import Path
from typing import Sequence

from fake_gpus.machine.views import MachineViews


class NamespaceError(RuntimeError):
    """The machine cannot give a process a private mount namespace; one line saying why."""


def check_support() -> None:
    """Raise NamespaceError unless `unshare` exists and we may create mount namespaces (root)."""
    if shutil.which("unshare") is None:
        raise NamespaceError("`unshare` (util-linux) is not on PATH: install util-linux to run processes with a node's views")
    if os.geteuid() != 0:
        raise NamespaceError("a private mount namespace for a node's views needs root (run as root)")


def mount_script(views: MachineViews) -> str:
    """Shell commands that mount the views, in order, failing on the first error."""
    system = views.sysfs / "devices" / "system"
    steps = [
        f"mount --bind {shlex.quote(str(views.proc_driver))} /proc/driver",
        f"mount --rbind /sys/devices/system {shlex.quote(str(system))}",
        f"mount --bind {shlex.quote(str(views.sysfs / 'bus' / 'pci'))} /sys/bus/pci",
        f"mount --rbind {shlex.quote(str(views.sysfs / 'devices'))} /sys/devices",
    ]
    return " && ".join(steps)


def wrap(argv: Sequence[str], views: MachineViews) -> list[str]:
    """argv that runs `argv` with the node's views mounted (same pid once running)."""
    check_support()
    script = f"set -e; {mount_script(views)}; exec \"$@\""
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *argv]


def environment(views: MachineViews) -> dict[str, str]:
    """Variables a process on the node needs besides the mounts: its NVML state and /proc/devices view."""
    return {"FAKE_NVML_STATE_DIR": str(views.state_dir), "ALT_PROC_DEVICES_PATH": str(views.proc_devices)}
