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


# Where a private root is put together: a tmpfs over this directory, in the namespace only (the host's stays
# as it is). It is left out of the root it holds, which cannot show itself.
PRIVATE_ROOT = "/mnt"


def root_script(extra: dict[str, Path]) -> str:
    """Shell commands that build a root showing every entry of / (bound, so the same files at the same paths)
    and the top-level directories `extra` (name -> host directory) the host's / lacks, e.g. the /templates
    NVIDIA's plugin reads its MPS daemon's template from; `chroot` into it follows. Building a root is what
    lets a directory appear at / without creating it on the host."""
    r = PRIVATE_ROOT
    populate = (f'for e in /* /.[!.]*; do n="${{e#/}}"; [ "$n" = {r[1:]} ] && continue; '
                f'if [ -L "$e" ]; then cp -P "$e" "{r}/$n"; '
                f'elif [ -d "$e" ]; then mkdir "{r}/$n" && mount --rbind "$e" "{r}/$n"; '
                f'elif [ -e "$e" ]; then : > "{r}/$n" && mount --bind "$e" "{r}/$n"; fi; done')
    steps = [f"mount -t tmpfs dra-testbed-root {r}", populate, f"mkdir {r}{r}"]
    for name, host in sorted(extra.items()):
        steps += [f"mkdir {r}/{shlex.quote(name)}", f"mount --bind {shlex.quote(str(host))} {r}/{shlex.quote(name)}"]
    return " && ".join(steps)


def wrap(argv: Sequence[str], views: MachineViews, root_dirs: dict[str, Path] | None = None) -> list[str]:
    """argv that runs `argv` with the node's views mounted (same pid once running); with `root_dirs` (name ->
    host directory) in a private root that also shows those directories at /<name> (root_script)."""
    check_support()
    script = f"set -e; {mount_script(views)}"
    if root_dirs:
        script += f"; {root_script(root_dirs)}; exec chroot {PRIVATE_ROOT} \"$@\""
    else:
        script += "; exec \"$@\""
    return ["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh", *argv]


def environment(views: MachineViews) -> dict[str, str]:
    """Variables a process on the node needs besides the mounts: its NVML state and /proc/devices view."""
    return {"FAKE_NVML_STATE_DIR": str(views.state_dir), "ALT_PROC_DEVICES_PATH": str(views.proc_devices)}
