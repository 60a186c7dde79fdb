"""The theme corpus: explicit cases from the questions this project answers, each tied to the fault it catches.

- VRAM boundaries: a board's marketed size is a little under that many GiB (H100 80GB: 79.6 GiB, H100 NVL
  94GB: 93.6, H200 141GB: 140.4, B200 180GB: 179.1), so a claim for all GPUs of at least 80/94/141/180 GiB
  leaves the board of that name out. A driver publishing too much memory (`wrong-memory`) lets it in.
- MIG density: a board packed full with its finest profile and one partition more (refused), all released,
  then repacked with two halves and one partition more (refused). Counters offered twice over
  (`oversized-counters`) let the extra partition in on top of the others.
- Fallback under contention: pods asking for the first available of a half, a quarter and an eighth of a
  board arrive until it is full, each taking the biggest that still fits. Placements one memory slice
  short (`short-placement`) let a later fallback land inside an earlier partition.

Every case runs through the scenario functions of testbed.workloads.scenarios, so every step is checked
against the model and the boards' real facts.
"""

from __future__ import annotations

from dataclasses import dataclass

from fake_gpus.catalog import GpuInstanceProfile, get_board
from fake_gpus.driver.identity import DriverIdentity, current_identity
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request
from testbed.workloads.selectors import MemoryCompare
from testbed.workloads.strategies import partition_request

GIB = 1024  # MiB
VRAM_BOUNDARIES_GIB = (80, 94, 141, 180)

ChurnCase = tuple[str, list[PodSpec], list[int]]  # node, pods in arrival order, departure order


@dataclass(frozen=True)
class VramCase:
    """All whole GPUs of at least `gib` GiB (memory_selector's case is (selector, all_devices))."""

    gib: int
    fault: str = "wrong-memory"

    @property
    def case(self) -> tuple[MemoryCompare, bool]:
        return MemoryCompare(">=", self.gib * GIB), True


VRAM_CASES = tuple(VramCase(gib) for gib in VRAM_BOUNDARIES_GIB)


def _plain(board_key: str) -> list[GpuInstanceProfile]:
    """Complete profiles without media extensions, smaller than the full GPU."""
    board = get_board(board_key)
    return [p for p in board.gpu_instance_profiles if p.complete and "+" not in p.name and p.memory_slices < board.memory_slices]


def _of_size(board_key: str, slices: int, spread: bool = False) -> GpuInstanceProfile:
    """The profile of `slices` memory slices with the most compute (2g.20gb over 1g.20gb on an H100), or
    with `spread` the most placements (3g.40gb over 4g.40gb)."""
    rank = (lambda p: (len(p.placements), p.slice_count)) if spread else (lambda p: (p.slice_count, len(p.placements)))
    return max((p for p in _plain(board_key) if p.memory_slices == slices), key=rank)


def _pods(prefix: str, node: str, profiles: list[list[str]], identity: DriverIdentity) -> list[PodSpec]:
    """One pod per entry, pinned to `node`, asking for the first available of the entry's profiles."""
    pods = []
    for index, names in enumerate(profiles):
        subs = tuple(partition_request(identity, f"s{i}" if len(names) > 1 else "r0", n) for i, n in enumerate(names))
        claim = ClaimSpec((Request("r0", subs, first_available=len(names) > 1),))
        pods.append(PodSpec(f"{prefix}{index}", (PodClaim("t0", template=claim),), node=node))
    return pods


@dataclass(frozen=True)
class ChurnCorpusCase:
    """A named partition-churn case on one partitionable node and the fault it must catch."""

    name: str
    case: ChurnCase
    fault: str


def density_cases(node: str, board_key: str, identity: DriverIdentity | None = None) -> list[ChurnCorpusCase]:
    """Pack full with the finest profile plus one more, release; repack with two halves plus one more."""
    identity = identity or current_identity()
    slices = get_board(board_key).memory_slices
    finest, quarter, half = _of_size(board_key, 1), _of_size(board_key, 2), _of_size(board_key, slices // 2, spread=True)
    pack = [[finest.name]] * finest.max_instances + [[quarter.name]]
    repack = [[half.name]] * (slices // half.memory_slices) + [[finest.name]]
    return [ChurnCorpusCase(f"pack-{node}", (node, _pods("pack", node, pack, identity), list(range(len(pack)))), "oversized-counters"),
            ChurnCorpusCase(f"repack-{node}", (node, _pods("repack", node, repack, identity), list(range(len(repack)))[::-1]),
                            "oversized-counters")]


def fallback_case(node: str, board_key: str, identity: DriverIdentity | None = None) -> ChurnCorpusCase:
    """Four pods asking for the first available of [half, quarter, eighth]: a half, a quarter, an eighth, refused."""
    identity = identity or current_identity()
    slices = get_board(board_key).memory_slices
    names = [_of_size(board_key, n).name for n in (slices // 2, 2, 1)]
    pods = _pods("fallback", node, [names] * 4, identity)
    return ChurnCorpusCase(f"fallback-{node}", (node, pods, [1, 3, 0, 2]), "short-placement")


def churn_cases(nodes: dict[str, str], identity: DriverIdentity | None = None) -> list[ChurnCorpusCase]:
    """Density and fallback cases for every partitionable node (node -> board key)."""
    cases = []
    for node, board in sorted(nodes.items()):
        cases += density_cases(node, board, identity) + [fallback_case(node, board, identity)]
    return cases
