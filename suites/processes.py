"""Which processes are still running, for tests that prove nothing they started outlived them."""

from __future__ import annotations

from pathlib import Path


def mentioning(marker: str) -> list[int]:
    """Pids of processes whose command line contains `marker` (a stand-in's folder, a cluster's label)."""
    needle = marker.encode()
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if needle in cmdline.read_bytes():
                found.append(int(cmdline.parent.name))
        except OSError:
            continue  # ended while we looked
    return found
