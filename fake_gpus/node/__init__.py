"""A node's hardware contract: which board, how many GPUs, in which mode, and how a Node object's labels
carry that. The one place a mode is parsed and node labels are encoded and decoded; it knows no board
facts (those are the catalog's), so the driver reads its nodes through it without reading the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

MODES = ("whole", "static-mig:<layout>", "dynamic-mig")
MODE_KINDS = ("whole", "static-mig", "dynamic-mig")
BOARD_LABEL = "dra-testbed.io/board"
COUNT_LABEL = "dra-testbed.io/gpu-count"
MODE_LABEL = "dra-testbed.io/mode"
LAYOUT_LABEL = "dra-testbed.io/mig-layout"


class ModeError(ValueError):
    """A mode that is none of MODES; one line naming the valid ones."""


class LabelError(ValueError):
    """Node labels that do not describe hardware; one line naming the node's label and what is valid."""


@dataclass(frozen=True)
class Mode:
    """How a node's GPUs are offered: whole GPUs, a fixed MIG layout, or partitionable (dynamic MIG)."""

    kind: str  # "whole" | "static-mig" | "dynamic-mig"
    mig_layout: str | None = None

    def __str__(self) -> str:
        return f"{self.kind}:{self.mig_layout}" if self.mig_layout else self.kind


def parse_mode(text: str) -> Mode:
    """`whole`, `static-mig:<layout>` or `dynamic-mig`; ModeError otherwise."""
    if text in ("whole", "dynamic-mig"):
        return Mode(text)
    if text.startswith("static-mig:") and text.removeprefix("static-mig:"):
        return Mode("static-mig", text.removeprefix("static-mig:"))
    raise ModeError(f"unknown mode {text!r}; valid modes: {', '.join(MODES)}")


def check_mode_for_board(mode: Mode, board: str, mig_capable: bool) -> None:
    """ModeError, one line naming the board, for a MIG mode on a board without MIG (a T4, L4 or L40S): real
    NVML answers every MIG call on it NOT_SUPPORTED, so neither a static layout nor dynamic MIG can exist there.
    The caller says whether the board has MIG (the catalog's fact; this module reads no board facts)."""
    if mode.kind != "whole" and not mig_capable:
        raise ModeError(f"mode {mode.kind} needs MIG, which board {board} does not have; valid mode for {board}: whole")


@dataclass(frozen=True)
class NodeHardware:
    """What a node carries: `count` GPUs of catalog board `board`, offered in `mode`."""

    board: str
    count: int
    mode: Mode = Mode("whole")


def hardware_labels(hardware: NodeHardware) -> dict[str, str]:
    """The labels that carry `hardware` on a Node object (what `hardware_from_labels` reads back)."""
    labels = {BOARD_LABEL: hardware.board, COUNT_LABEL: str(hardware.count), MODE_LABEL: hardware.mode.kind}
    if hardware.mode.mig_layout:
        labels[LAYOUT_LABEL] = hardware.mode.mig_layout
    return labels


def hardware_from_labels(labels: Mapping[str, str] | None) -> NodeHardware | None:
    """The hardware a Node's labels describe; None for a node without fake GPUs; LabelError if malformed."""
    labels = labels or {}
    if BOARD_LABEL not in labels or COUNT_LABEL not in labels:
        return None
    count = labels[COUNT_LABEL]
    if not count.isdigit() or int(count) < 1:
        raise LabelError(f"label {COUNT_LABEL}={count!r} is not a whole number of GPUs >= 1")
    kind = labels.get(MODE_LABEL, "whole")
    layout = labels.get(LAYOUT_LABEL)
    try:
        mode = parse_mode(f"{kind}:{layout}" if kind == "static-mig" and layout else kind)
    except ModeError as exc:
        raise LabelError(f"label {MODE_LABEL}: {exc} (static-mig needs {LAYOUT_LABEL})") from exc
    return NodeHardware(labels[BOARD_LABEL], int(count), mode)
