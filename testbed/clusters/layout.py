"""Cluster layouts: which nodes carry which boards, how many, in which MIG mode.

A layout comes from a YAML file in `clusters/layouts/` or from `--node NAME=BOARD:COUNT:MODE` flags.
Every problem is reported as one line naming what was wrong and what is valid.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from pathlib import Path

import yaml

from fake_gpus.catalog import BOARD_KEYS, get_board
from fake_gpus.machine.provision import ProvisionError, check_hardware
from fake_gpus.node import SHARES_SUFFIX, Mode, ModeError, NodeHardware, check_mode_for_board, parse_shares
from fake_gpus.node import parse_mode as parse_hardware_mode

from testbed.errors import BadInputError

NODE_KEYS = ("name", "board", "count", "mode", "consumableShares", "healthCheck", "replicas")
LAYOUT_KEYS = ("name", "description", "nodes")
_NODE_NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
# no layout grows past this, --allow-large or not: each node is an object in memory before anything starts
HARD_MAX_NODES = 50_000
ALLOW_LARGE_FLAG = "--allow-large"


class LayoutError(BadInputError):
    """A layout that cannot be built; the message is one line for the user."""


@dataclass(frozen=True)
class NodeSpec:
    """One node of a layout."""

    name: str
    board: str
    count: int
    mode: Mode

    @property
    def hardware(self) -> NodeHardware:
        """The node's hardware contract (fake_gpus.node)."""
        return NodeHardware(self.board, self.count, self.mode)


@dataclass(frozen=True)
class Layout:
    """The nodes of a cluster."""

    nodes: tuple[NodeSpec, ...]
    name: str = "custom"

    def node(self, name: str) -> NodeSpec:
        return next(n for n in self.nodes if n.name == name)


def parse_mode(text: str, where: str) -> Mode:
    """`whole`, `static-mig:<layout>` or `dynamic-mig` (the node contract's parser); LayoutError at `where`."""
    try:
        return parse_hardware_mode(text)
    except ModeError as exc:
        raise LayoutError(f"{where}: {exc}") from exc


def _mode_on(board: str, text: str, where: str) -> Mode:
    """The mode `text` for a node of `board`: parsed, and refused if it needs MIG the board lacks (LayoutError)."""
    mode = parse_mode(text, where)
    try:
        check_mode_for_board(mode, board, get_board(board).mig_capable)
    except ModeError as exc:
        raise LayoutError(f"{where}: {exc}") from exc
    return mode


def _board(text: str, where: str) -> str:
    if text not in BOARD_KEYS:
        raise LayoutError(f"{where}: unknown board {text!r}; valid boards: {', '.join(BOARD_KEYS)}")
    return text


def _count(value: object, board: str, where: str) -> int:
    """A node's GPU count: 1 up to what one node of `board` holds (the catalog's gpus_per_node)."""
    most = get_board(board).gpus_per_node
    if isinstance(value, bool) or not isinstance(value, int) and not (isinstance(value, str) and value.isdigit()):
        raise LayoutError(f"{where}: count {value!r} is not a whole number; valid: 1 to {most}")
    count = int(value)
    if not 1 <= count <= most:
        raise LayoutError(f"{where}: count {count} is out of range; valid: 1 to {most} GPUs per {board} node")
    return count


def _name(text: str, where: str) -> str:
    if not isinstance(text, str) or not _NODE_NAME.match(text) or len(text) > 63:
        raise LayoutError(f"{where}: node name {text!r} is not a valid DNS label (lower-case letters, digits, '-')")
    return text


def parse_node_flag(flag: str) -> NodeSpec:
    """A `--node NAME=BOARD:COUNT:MODE` flag (MODE defaults to whole; `MODE:shares=memory|unlimited|<N>` shares
    the node's devices as NVIDIA's --consumable-shares does)."""
    where = f"--node {flag}"
    if "=" not in flag:
        raise LayoutError(f"{where}: expected NAME=BOARD:COUNT:MODE, e.g. gpu-0=h100-80gb:8:whole")
    name, rest = flag.split("=", 1)
    parts = rest.split(":", 2)
    if len(parts) < 2:
        raise LayoutError(f"{where}: expected NAME=BOARD:COUNT:MODE, e.g. gpu-0=h100-80gb:8:whole")
    board, count = parts[0], parts[1]
    mode = parts[2] if len(parts) == 3 else "whole"
    board = _board(board, where)
    return NodeSpec(_name(name, where), board, _count(count, board, where), _mode_on(board, mode, where))


def _check_unique(nodes: list[NodeSpec], where: str) -> None:
    seen: set[str] = set()
    for node in nodes:
        if node.name in seen:
            raise LayoutError(f"{where}: node name {node.name!r} is used twice; each node needs its own name")
        seen.add(node.name)


def from_flags(flags: list[str]) -> Layout:
    """A layout from `--node` flags."""
    if not flags:
        raise LayoutError("no nodes: give --layout FILE or at least one --node NAME=BOARD:COUNT:MODE")
    nodes = [parse_node_flag(f) for f in flags]
    _check_unique(nodes, "--node")
    return Layout(tuple(nodes))


def _nodes_of_entry(entry: object, where: str) -> list[NodeSpec]:
    if not isinstance(entry, dict):
        raise LayoutError(f"{where}: expected a mapping with keys {', '.join(NODE_KEYS)}")
    unknown = sorted(set(entry) - set(NODE_KEYS))
    if unknown:
        raise LayoutError(f"{where}: unknown key {unknown[0]!r}; valid keys: {', '.join(NODE_KEYS)}")
    for key in ("name", "board", "count"):
        if key not in entry:
            raise LayoutError(f"{where}: missing key {key!r}; required: name, board, count")
    board = _board(str(entry["board"]), where)
    count = _count(entry["count"], board, where)
    mode = _mode_on(board, str(entry.get("mode", "whole")), where)
    if "consumableShares" in entry:  # NVIDIA's --consumable-shares for this pool
        if mode.shares:  # two values for one setting: neither may silently win
            raise LayoutError(f"{where}: consumableShares and a mode ending {SHARES_SUFFIX}{mode.shares} both set the shares; give one")
        try:
            mode = replace(mode, shares=parse_shares(str(entry["consumableShares"])))
        except ModeError as exc:
            raise LayoutError(f"{where}: {exc}") from exc
    if "healthCheck" in entry:  # NVIDIA's NVMLDeviceHealthCheck gate for this pool (or a mode ending :health)
        if not isinstance(entry["healthCheck"], bool):
            raise LayoutError(f"{where}: healthCheck {entry['healthCheck']!r} is not valid; valid: true, false")
        if mode.health and not entry["healthCheck"]:  # two values for one setting: neither may silently win
            raise LayoutError(f"{where}: healthCheck false and a mode ending :health disagree; give one")
        mode = replace(mode, health=entry["healthCheck"])
    replicas = entry.get("replicas", 1)
    if isinstance(replicas, bool) or not isinstance(replicas, int) or replicas < 1:
        raise LayoutError(f"{where}: replicas {replicas!r} must be a whole number >= 1")
    if replicas > HARD_MAX_NODES:
        raise LayoutError(f"{where}: replicas {replicas} is over the limit of {HARD_MAX_NODES} nodes per layout; valid: 1 to {HARD_MAX_NODES}")
    base = str(entry["name"])
    if replicas == 1:
        return [NodeSpec(_name(base, where), board, count, mode)]
    return [NodeSpec(_name(f"{base}-{i}", where), board, count, mode) for i in range(replicas)]


def load_layout(path: str | Path) -> Layout:
    """A layout from a YAML file: `nodes: [{name, board, count, mode, consumableShares, healthCheck, replicas}]`."""
    file = Path(path)
    try:
        data = yaml.safe_load(file.read_text())
    except OSError as exc:
        raise LayoutError(f"cannot read layout {file}: {exc.strerror}; valid: a readable YAML file such as clusters/layouts/mixed-h100-b200.yaml") from exc
    except yaml.YAMLError as exc:
        raise LayoutError(f"layout {file} is not valid YAML: {str(exc).splitlines()[0]}") from exc
    except ValueError as exc:  # a value YAML parses but Python refuses: an integer of over 4,300 digits, a 13th month
        raise LayoutError(f"layout {file} has a value that cannot be read ({str(exc).split(';')[0]}); valid: a layout such as clusters/layouts/mixed-h100-b200.yaml") from exc
    if not isinstance(data, dict):
        raise LayoutError(f"layout {file}: expected a mapping with keys {', '.join(LAYOUT_KEYS)}")
    unknown = sorted(set(data) - set(LAYOUT_KEYS))
    if unknown:
        raise LayoutError(f"layout {file}: unknown key {unknown[0]!r}; valid keys: {', '.join(LAYOUT_KEYS)}")
    entries = data.get("nodes")
    if not isinstance(entries, list) or not entries:
        raise LayoutError(f"layout {file}: 'nodes' must be a non-empty list")
    nodes: list[NodeSpec] = []
    for index, entry in enumerate(entries):
        nodes += _nodes_of_entry(entry, f"layout {file} node {index + 1}")
        if len(nodes) > HARD_MAX_NODES:
            raise LayoutError(f"layout {file}: {len(nodes)}+ nodes is over the limit of {HARD_MAX_NODES} nodes per layout")
    _check_unique(nodes, f"layout {file}")
    return Layout(tuple(nodes), name=str(data.get("name", file.stem)))


def check_size(layout: Layout, backend: str, max_nodes: int, max_gpus: int, allow_large: bool) -> None:
    """Refuse a layout above a backend's sane size unless `allow_large` (one line naming both bounds)."""
    nodes, gpus = len(layout.nodes), sum(n.count for n in layout.nodes)
    if allow_large or (nodes <= max_nodes and gpus <= max_gpus):
        return
    what = f"{nodes} nodes" if nodes > max_nodes else f"{gpus} GPUs"
    raise LayoutError(f"layout {layout.name} has {what}; valid for {backend}: up to {max_nodes} nodes and {max_gpus} GPUs, "
                      f"or pass {ALLOW_LARGE_FLAG} to go beyond (up to {HARD_MAX_NODES} nodes)")


def check_layout(layout: Layout) -> None:
    """Refuse, before anything starts, a board or MIG layout the driver cannot serve (LayoutError, one line)."""
    for node in layout.nodes:
        try:
            check_hardware(node.hardware)
        except ProvisionError as exc:
            raise LayoutError(f"node {node.name}: {exc}") from exc
