"""Mount points of this mount namespace, and taking down what a run mounted."""

from __future__ import annotations

import subprocess
from pathlib import Path


def mount_points() -> list[str]:
    """Mount points of this mount namespace, in mount order."""
    try:
        return [line.split()[4] for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except OSError:
        return []


def mounted_below(root: Path | str) -> list[str]:
    """Mount points at or under `root`."""
    prefix = str(Path(root).resolve()) if Path(root).exists() else str(root)
    return [p for p in mount_points() if p == prefix or p.startswith(prefix.rstrip("/") + "/")]


def unmount_below(root: Path | str) -> None:
    """Lazily unmount everything mounted at or under `root`, deepest first (a mount stacked on itself
    twice comes off twice), so that removing `root` never reaches into the host."""
    for point in sorted(mounted_below(root), key=len, reverse=True):
        subprocess.run(["umount", "-l", point], capture_output=True)
