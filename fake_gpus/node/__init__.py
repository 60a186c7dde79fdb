"""A node's hardware contract: which board, how many GPUs, in which mode, and how a Node object's labels
carry that. The one place a mode is parsed and node labels are encoded and decoded; it knows no board
facts (those are the catalog's), so the driver reads its nodes through it without reading the catalog.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Mapping

MODES = ("whole", "static-mig:<layout>", "dynamic-mig")
# NVIDIA's --consumable-shares values (cmd/gpu-kubelet-plugin/main.go); "disabled" is the absence of sharing
SHARES = ("disabled", "memory", "unlimited", "<N>")
SHARES_SUFFIX = ":shares="
MODE_KINDS = ("whole", "static-mig", "dynamic-mig")
BOARD_LABEL = "dra-testbed.io/board"
COUNT_LABEL = "dra-testbed.io/gpu-count"
MODE_LABEL = "dra-testbed.io/mode"
LAYOUT_LABEL = "dra-testbed.io/mig-layout"
SHARES_LABEL = "dra-testbed.io/consumable-shares"
# device health monitoring (NVIDIA's NVMLDeviceHealthCheck gate, here per node pool): a mode ending `:health`
HEALTH_SUFFIX = ":health"
HEALTH_LABEL = "dra-testbed.io/health-check"


class ModeError(ValueError):
    """A mode that is none of MODES; one line naming the valid ones."""


class LabelError(ValueError):
    """Node labels that do not describe hardware; one line naming the node's label and what is valid."""


@dataclass(frozen=True)
class Mode:
    """How a node's GPUs are offered: whole GPUs, a fixed MIG layout, or partitionable (dynamic MIG); and
    whether several claims may share a device (`shares`: NVIDIA's --consumable-shares value, None when
    disabled)."""

    kind: str  # "whole" | "static-mig" | "dynamic-mig"
    mig_layout: str | None = None
    shares: str | None = None  # "memory" | "unlimited" | "<N>" (a positive integer)
    health: bool = False  # the driver monitors the GPUs' health and taints failed devices

    def __str__(self) -> str:
        text = f"{self.kind}:{self.mig_layout}" if self.mig_layout else self.kind
        text = f"{text}{SHARES_SUFFIX}{self.shares}" if self.shares else text
        return f"{text}{HEALTH_SUFFIX}" if self.health else text


def parse_shares(text: str) -> str | None:
    """A --consumable-shares value as NVIDIA's plugin takes it: None for `disabled`; ModeError otherwise."""
    value = text.strip()
    if value == "disabled":
        return None
    if value in ("memory", "unlimited") or value.isascii() and value.isdigit() and int(value) > 0:
        return str(int(value)) if value.isdigit() else value
    raise ModeError(f"consumable shares {text!r} is not valid; valid: {', '.join(SHARES)} (N a whole number >= 1)")


def parse_mode(text: str) -> Mode:
    """`whole`, `static-mig:<layout>` or `dynamic-mig`, each maybe followed by `:shares=<value>`, then maybe
    `:health`; ModeError otherwise."""
    health = text.endswith(HEALTH_SUFFIX)
    text = text.removesuffix(HEALTH_SUFFIX)
    shares = None
    if SHARES_SUFFIX in text:
        text, _, value = text.rpartition(SHARES_SUFFIX)
        shares = parse_shares(value)
    if text in ("whole", "dynamic-mig"):
        return Mode(text, shares=shares, health=health)
    if text.startswith("static-mig:") and text.removeprefix("static-mig:"):
        return Mode("static-mig", text.removeprefix("static-mig:"), shares, health)
    raise ModeError(f"unknown mode {text!r}; valid modes: {', '.join(MODES)}, each maybe followed by "
                    f"{SHARES_SUFFIX}<{'|'.join(SHARES[1:])}>, then maybe {HEALTH_SUFFIX}")


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
    if hardware.mode.shares:
        labels[SHARES_LABEL] = hardware.mode.shares
    if hardware.mode.health:
        labels[HEALTH_LABEL] = "true"
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
    if SHARES_LABEL in labels:
        try:
            mode = Mode(mode.kind, mode.mig_layout, parse_shares(labels[SHARES_LABEL]))
        except ModeError as exc:
            raise LabelError(f"label {SHARES_LABEL}: {exc}") from exc
    if labels.get(HEALTH_LABEL, "false") not in ("true", "false"):
        raise LabelError(f"label {HEALTH_LABEL}={labels[HEALTH_LABEL]!r} is not valid; valid: true, false")
    mode = replace(mode, health=labels.get(HEALTH_LABEL) == "true")
    return NodeHardware(labels[BOARD_LABEL], int(count), mode)
