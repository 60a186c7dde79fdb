"""MIG placement maths over a GPU's memory slices, shared by the catalog and the driver.

One search serves the catalog (are a named layout's counts placeable on a board?) and the driver
(where exactly do a static layout's instances go, among the placements NVML reports?). Pure
functions: no catalog, no NVML, so the driver can use it without reading the catalog.
"""

from __future__ import annotations

from collections.abc import Sequence

__all__ = ["find_placements", "max_disjoint_placements"]


def max_disjoint_placements(placements: tuple[int, ...] | list[int], size: int) -> int:
    """Most instances of one profile that fit side by side (greedy by end)."""
    count, free_from = 0, -1
    for start in sorted(placements):
        if start >= free_from:
            count, free_from = count + 1, start + size
    return count


def find_placements(candidates: Sequence[Sequence[tuple[int, int]]], slices: int) -> list[tuple[int, int]] | None:
    """One disjoint (start, size) run per instance, chosen among that instance's candidate runs.

    ``candidates[i]`` lists instance i's possible runs; the answer is in the same order, or None when
    no choice keeps every run inside ``slices`` (the board's memory slices: the catalog's or what NVML
    reports, never a constant here) without overlaps.
    """
    # Biggest first keeps the search tiny: a GPU holds only a handful of instances.
    order = sorted(range(len(candidates)), key=lambda i: -max((size for _, size in candidates[i]), default=0))
    chosen: dict[int, tuple[int, int]] = {}

    def place(k: int, used: int) -> bool:
        if k == len(order):
            return True
        i = order[k]
        for start, size in candidates[i]:
            mask = ((1 << size) - 1) << start
            if start >= 0 and start + size <= slices and not used & mask and place(k + 1, used | mask):
                chosen[i] = (start, size)
                return True
        return False

    return [chosen[i] for i in range(len(candidates))] if place(0, 0) else None
