"""Hardware catalog: the one source of truth for boards and their MIG facts.

Each board lives in ``boards/<key>.yaml``.  Every fact in a file carries a
citation in a ``sources`` mapping beside it; a fact nobody could find is
``null`` with the source ``unknown``.  The loader validates the whole file on
load and raises :class:`CatalogError` with a one-line message naming the file,
the key and what would have been valid.  A list or mapping repeated through a
YAML alias is refused: a few aliases can stand for billions of nodes.

File layout (one mapping per board)::

    key, product_name, memory_mib, ...      board facts
    sources: {field: citation, ...}          one citation per board fact
    gpu_instance_profiles:
      - name, nvml_profile, id, ...          one entry per GI profile
        sources: {field: citation, ...}      ``default`` covers every field not
                                             named (one table row = one source)
        compute_instance_profiles:
          - name, nvml_profile, id, slice_count, multiprocessors
            sources: {...}                   same rule as above
    mig_layouts:                             optional named layouts
      layouts: {name: {profile: count}}
      sources: {default | name: citation}

A board without MIG (T4, L4, L40S) lists no profiles (``gpu_instance_profiles: []``) and says
``memory_slices: 0``; ``Board.mig_capable`` tells the two apart.

Counts a public source did not give are ``None`` in the
dataclasses: callers that need every number should check
``GpuInstanceProfile.complete`` or ``Board.unknown_facts()``.

Modules: ``model`` (the dataclasses), ``fields`` (fact types and citations), ``schema`` (one board
file), ``layouts`` (named MIG layouts); the placement search itself is ``fake_gpus.mig_placement``,
which the driver uses too without reading the catalog.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType

from fake_gpus.catalog.layouts import layout_fits
from fake_gpus.catalog.model import (
    COMPUTE_SLICES,
    MEMORY_SLICES,
    Board,
    CatalogError,
    ComputeInstanceProfile,
    GpuInstanceProfile,
)
from fake_gpus.catalog.schema import load_board_file
from fake_gpus.mig_placement import find_placements, max_disjoint_placements

__all__ = [
    "BOARD_KEYS",
    "BOARDS_DIR",
    "COMPUTE_SLICES",
    "MEMORY_SLICES",
    "Board",
    "CatalogError",
    "ComputeInstanceProfile",
    "GpuInstanceProfile",
    "all_boards",
    "find_placements",
    "get_board",
    "load_board_file",
    "load_catalog",
    "layout_fits",
    "max_disjoint_placements",
]

BOARD_KEYS: tuple[str, ...] = (
    "h100-80gb",
    "h100-nvl-94gb",
    "h200-141gb",
    "b200-180gb",
    "gb200-186gb",
    "b300-288gb",
    "gb300-288gb",
    "gh200-96gb",
    "rtx-pro-6000-96gb",
    "a100-40gb",
    "a100-80gb",
    "a30-24gb",
    "l4-24gb",
    "l40s-48gb",
    "t4-16gb",
)
BOARDS_DIR = Path(__file__).parent / "boards"


def load_catalog(path: Path | str | None = None) -> Mapping[str, Board]:
    """Load every ``*.yaml`` board in ``path`` (default: the packaged boards).

    The packaged catalog is cached and must hold exactly :data:`BOARD_KEYS`.
    """
    if path is None:
        return _default_catalog()
    return _load_dir(Path(path))


def _load_dir(directory: Path) -> Mapping[str, Board]:
    if not directory.is_dir():
        raise CatalogError(f"{directory}: (directory): does not exist; valid: a directory of <board>.yaml files")
    boards = {f.stem: load_board_file(f) for f in sorted(directory.glob("*.yaml"))}
    return MappingProxyType(boards)


@functools.cache
def _board(key: str) -> Board:
    """One packaged board, loaded and validated once."""
    file = BOARDS_DIR / f"{key}.yaml"
    if not file.is_file():
        raise CatalogError(f"{file.name}: (file): does not exist in {BOARDS_DIR}; valid: one file per board of {', '.join(BOARD_KEYS)}")
    return load_board_file(file)


@functools.cache
def _default_catalog() -> Mapping[str, Board]:
    extra = sorted({f.stem for f in BOARDS_DIR.glob("*.yaml")} - set(BOARD_KEYS))
    if extra:
        raise CatalogError(f"{BOARDS_DIR}: (directory): unexpected boards {extra}; valid: {', '.join(BOARD_KEYS)}")
    return MappingProxyType({k: _board(k) for k in BOARD_KEYS})


def get_board(key: str) -> Board:
    """The board called ``key``; CatalogError naming the valid keys if unknown."""
    if key not in BOARD_KEYS:
        raise CatalogError(f"unknown board {key!r}; valid boards: {', '.join(BOARD_KEYS)}")
    return _board(key)


def all_boards() -> tuple[Board, ...]:
    """Every board of the catalog, in :data:`BOARD_KEYS` order."""
    return tuple(_default_catalog().values())
