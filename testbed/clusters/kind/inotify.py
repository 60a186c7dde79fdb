"""The host's inotify limits, checked before a kind cluster is made.

Why: every kind node runs systemd, containerd and a kubelet, each holding inotify instances of the
host's (one user namespace for all containers). With the kernel's default
fs.inotify.max_user_instances of 128, a cluster of a few nodes exhausts it and the workers never
join ("too many open files" in their kubelet logs), which shows up much later as a join timeout.
kind's known issues name the values below. As root we raise them (machine-wide, saying so);
otherwise one line says what to set.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from testbed.errors import EnvironmentProblem

# kind's known issues ("Pod errors due to too many open files")
REQUIRED = {"max_user_instances": 512, "max_user_watches": 524288}
PROC = Path("/proc")  # where the limits are read and written (a test points it at a directory of its own)


class InotifyLimitError(EnvironmentProblem):
    """The host's inotify limits are too low for kind and cannot be raised here; one line."""


@dataclass(frozen=True)
class Raised:
    name: str
    old: int
    new: int


def _path(proc: Path, name: str) -> Path:
    return proc / "sys" / "fs" / "inotify" / name


def _is_root() -> bool:
    return os.geteuid() == 0


def low_limits(proc: Path | None = None) -> dict[str, int]:
    """name -> current value of each limit below what kind needs (an unreadable limit is left unchecked)."""
    proc, low = proc or PROC, {}
    for name, wanted in REQUIRED.items():
        try:
            value = int(_path(proc, name).read_text().strip())
        except (OSError, ValueError):
            continue
        if value < wanted:
            low[name] = value
    return low


def ensure_limits(proc: Path | None = None, is_root: Callable[[], bool] | None = None) -> list[Raised]:
    """Raise the low limits when root (returns what was raised); InotifyLimitError with what to set otherwise."""
    proc, is_root = proc or PROC, is_root or _is_root
    low = low_limits(proc)
    if not low:
        return []
    fix = " ".join(f"fs.inotify.{name}={REQUIRED[name]}" for name in low)
    now = ", ".join(f"fs.inotify.{name} is {value}" for name, value in low.items())
    if not is_root():
        raise InotifyLimitError(f"{now}: kind's workers do not join below {fix.replace(' ', ', ')}; "
                                f"run `sudo sysctl -w {fix}` (or as root, dra-testbed raises them itself)")
    raised = []
    for name, value in low.items():
        try:
            _path(proc, name).write_text(f"{REQUIRED[name]}\n")
        except OSError as exc:
            raise InotifyLimitError(f"{now} and writing fs.inotify.{name} failed ({exc.strerror}); "
                                    f"kind's workers do not join below it: run `sysctl -w {fix}` on the host") from exc
        raised.append(Raised(name, value, REQUIRED[name]))
    return raised
