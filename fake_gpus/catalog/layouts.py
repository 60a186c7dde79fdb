"""Named MIG layouts: can a {profile: count} mapping be laid out on one GPU of a board?"""

from __future__ import annotations

from collections.abc import Mapping

from fake_gpus.catalog.model import CatalogError, GpuInstanceProfile
from fake_gpus.mig_placement import find_placements

__all__ = ["layout_fits"]


def layout_fits(profiles: tuple[GpuInstanceProfile, ...], counts: Mapping[str, int], slices: int) -> bool:
    """Can ``counts`` instances of the named profiles coexist on one GPU?

    They must take disjoint runs of the board's ``slices`` memory slices at real placements, stay
    within each profile's instance limit and within the board's compute slices (its largest profile's).
    """
    by_name = {p.name: p for p in profiles}
    unknown = sorted(set(counts) - set(by_name))
    if unknown:
        raise CatalogError(f"unknown MIG profiles {unknown}; valid profiles: {', '.join(by_name)}")
    # the instance limit first: a count is expanded into a list below (a count of 2**40 once grew a fuzz run to 13.6 GB)
    if any(c > by_name[n].max_instances for n, c in counts.items()):
        return False
    wanted = [by_name[n] for n, c in counts.items() for _ in range(c)]
    if sum(p.slice_count for p in wanted) > max((p.slice_count for p in profiles), default=0):
        return False
    return find_placements([[(s, p.memory_slices) for s in p.placements] for p in wanted], slices) is not None
