"""Where each fact of a board comes from: every fact with its value and class, and the per-board
table of classes the README shows (generated here, checked against the README by a test)."""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from fake_gpus.catalog.model import Board

__all__ = ["CLASS_MARK", "README_COLUMNS", "facts", "grouped", "markdown_section", "markdown_table"]

# The letters the README table uses per class.
CLASS_MARK = {"measured": "M", "published": "P", "derived": "D", "unknown": "?"}
# README column -> GPU-instance fact (the board row shows the board's own fact where it has one).
README_COLUMNS = {
    "memory": "memory_mib", "SMs": "multiprocessors", "CE": "copy_engines", "DEC": "decoders", "ENC": "encoders",
    "JPEG": "jpeg_engines", "OFA": "ofa_engines", "instances": "max_instances", "placements": "placements",
}
_BOARD_ROW = ("memory_mib", "multiprocessors", "copy_engines", "decoders", "encoders", "jpeg_engines", "ofa_engines")


def facts(board: Board) -> Iterator[tuple[str, Any]]:
    """(fact path, value) of every fact of ``board`` that has a citation, in file order."""
    for path in board.sources:
        yield path, _value(board, path)


def grouped(board: Board) -> list[tuple[str, str, str, list[tuple[str, Any]]]]:
    """(entry, class, citation, [(fact, value), ...]) per entry and citation, in file order.

    An entry is "board", a GPU-instance profile ("3g.90gb"), one of its compute-instance profiles
    ("3g.90gb/1c.3g.90gb") or "mig_layouts"; the facts of one table row share one citation."""
    groups: dict[tuple[str, str], list[tuple[str, Any]]] = {}
    for path, value in facts(board):
        entry, fact = _split(board, path)
        groups.setdefault((entry, board.sources[path]), []).append((fact, value))
    out = []
    for (entry, citation), items in groups.items():
        cls, text = board.provenance(_path_of(entry, items[0][0]))
        out.append((entry, cls, text, items))
    return out


def _split(board: Board, path: str) -> tuple[str, str]:
    if path.startswith("mig_layouts."):
        return "mig_layouts", path.removeprefix("mig_layouts.")
    if not path.startswith("gpu_instance_profiles."):
        return "board", path
    rest = path.removeprefix("gpu_instance_profiles.")
    gi = next(g for g in board.gpu_instance_profiles if rest.startswith(g.name + "."))
    fact = rest.removeprefix(gi.name + ".")
    if fact.startswith("compute_instance_profiles."):
        ci_rest = fact.removeprefix("compute_instance_profiles.")
        label = next(gi.ci_label(c) for c in gi.compute_instance_profiles if ci_rest.startswith(gi.ci_label(c) + "."))
        return f"{gi.name}/{label}", ci_rest.removeprefix(label + ".")
    return gi.name, fact


def _path_of(entry: str, fact: str) -> str:
    if entry == "board":
        return fact
    if entry == "mig_layouts":
        return f"mig_layouts.{fact}"
    gi, _, ci = entry.partition("/")
    return f"gpu_instance_profiles.{gi}.compute_instance_profiles.{ci}.{fact}" if ci else f"gpu_instance_profiles.{gi}.{fact}"


def _value(board: Board, path: str) -> Any:
    if path.startswith("mig_layouts."):
        return dict(board.mig_layouts[path.removeprefix("mig_layouts.")])
    if not path.startswith("gpu_instance_profiles."):
        return getattr(board, path)
    rest = path.removeprefix("gpu_instance_profiles.")
    for gi in board.gpu_instance_profiles:
        if not rest.startswith(gi.name + "."):
            continue
        fact = rest.removeprefix(gi.name + ".")
        if not fact.startswith("compute_instance_profiles."):
            return getattr(gi, fact)
        ci_rest = fact.removeprefix("compute_instance_profiles.")
        for ci in gi.compute_instance_profiles:
            if ci_rest.startswith(gi.ci_label(ci) + "."):
                return getattr(ci, ci_rest.removeprefix(gi.ci_label(ci) + "."))
    raise KeyError(path)


def _mark(board: Board, path: str) -> str:
    return CLASS_MARK[board.provenance(path)[0]]


def markdown_table(board: Board) -> str:
    """One row per MIG profile (and the whole board): M(easured), P(ublished) or D(erived) per fact."""
    head = ["", *README_COLUMNS]
    rows = [head, ["---"] * len(head)]
    rows.append(["board", *(_mark(board, f) if f in _BOARD_ROW else "" for f in README_COLUMNS.values())])
    for gi in board.gpu_instance_profiles:
        base = f"gpu_instance_profiles.{gi.name}"
        rows.append([gi.name, *(_mark(board, f"{base}.{f}") for f in README_COLUMNS.values())])
    return "\n".join("| " + " | ".join(r) + " |" for r in rows)


def markdown_section(boards: Iterable[Board]) -> str:
    """The README's per-board tables: one heading and table per board."""
    parts = []
    for b in boards:
        counts = {c: len(paths) for c, paths in b.facts_by_class().items() if paths}
        summary = ", ".join(f"{n} {c}" for c, n in counts.items())
        parts.append(f"**{b.key}** ({b.product_name}; {summary} facts)\n\n{markdown_table(b)}")
    return "\n\n".join(parts)
