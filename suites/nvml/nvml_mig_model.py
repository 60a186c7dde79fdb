"""A Python model of MIG slice occupancy, computed from the catalog only, to check the library against."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, field


def full_slices(board) -> int:
    """Compute slices of the whole GPU: the largest GPU-instance slice count."""
    return max(p.slice_count for p in board.gpu_instance_profiles)


def gi_id(board, start: int, size: int) -> int:
    """Expected GPU instance id: the memory-slice tree (whole GPU 0, halves 1-2, quarters 3-6, eighths 7-14)."""
    total = board.memory_slices
    return total // size - 1 + start // size


def ci_starts(gi_slices: int, ci_slices: int) -> list[int]:
    return list(range(0, gi_slices - ci_slices + 1, ci_slices))


@dataclass
class GpuModel:
    board: object
    gis: dict[int, tuple[object, int]] = field(default_factory=dict)  # gi id -> (profile, start)
    cis: dict[int, dict[int, tuple[object, int]]] = field(default_factory=dict)  # gi id -> ci id -> (ci profile, start)

    def fits(self, profile, start: int) -> bool:
        if sum(1 for p, _ in self.gis.values() if p.id == profile.id) >= profile.max_instances:
            return False
        if sum(p.slice_count for p, _ in self.gis.values()) + profile.slice_count > full_slices(self.board):
            return False
        return all(start + profile.memory_slices <= s or s + p.memory_slices <= start for p, s in self.gis.values())

    def default_start(self, profile) -> int | None:
        """Where create-without-placement lands: the free placement with the highest start."""
        for start in sorted(profile.placements, reverse=True):
            if self.fits(profile, start):
                return start
        return None

    def ci_fits(self, gi: int, cp, start: int) -> bool:
        gp, _ = self.gis[gi]
        mine = self.cis.get(gi, {})
        if sum(1 for p, _ in mine.values() if p.id == cp.id) >= gp.slice_count // cp.slice_count:
            return False
        return all(start + cp.slice_count <= s or s + p.slice_count <= start for p, s in mine.values())

    def ci_default_start(self, gi: int, cp) -> int | None:
        gp, _ = self.gis[gi]
        for start in ci_starts(gp.slice_count, cp.slice_count):
            if self.ci_fits(gi, cp, start):
                return start
        return None


def maximal_layouts(board) -> list[tuple[tuple[int, int], ...]]:
    """Every maximal set of (profile id, start) GPU instances the catalog allows, order-free."""
    options = [(p, s) for p in board.gpu_instance_profiles for s in p.placements]
    found: set[tuple[tuple[int, int], ...]] = set()

    def grow(model: GpuModel, chosen: list, first: int) -> None:
        extended = False
        for i in range(len(options)):
            p, s = options[i]
            if model.fits(p, s):
                extended = True
                if i < first:
                    continue  # reached through another order
                model.gis[len(chosen) + 100] = (p, s)
                chosen.append((p.id, s))
                grow(model, chosen, i)
                chosen.pop()
                del model.gis[len(chosen) + 100]
        if not extended:
            found.add(tuple(sorted(chosen)))

    grow(GpuModel(board), [], 0)
    return sorted(found)


def overlapping_pairs(board):
    """All ((profile, start), (profile, start)) pairs whose memory slices overlap."""
    options = [(p, s) for p in board.gpu_instance_profiles for s in p.placements]
    for (a, sa), (b, sb) in itertools.product(options, repeat=2):
        if sa < sb + b.memory_slices and sb < sa + a.memory_slices:
            yield (a, sa), (b, sb)
