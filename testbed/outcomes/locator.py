"""Where a field of a YAML document is: the line of a field path as the API server writes it
(`spec.template.spec.containers[0].foo`), and the keys a document sets twice.

The API server names an unknown field by its path in the object it was sent; the user needs the line in
their file. PyYAML's composed nodes keep a start mark per key and value, so the path is followed down the
node tree; where the path leaves the tree (a field the server added, a key with dots in it) the line of
the deepest node reached is the best answer. Duplicate keys never reach the server (PyYAML keeps the last
value), so they are found here, on the same nodes.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

import yaml

_STEP = re.compile(r"([^.\[\]]+)|\[(\d+)\]")


@dataclass(frozen=True)
class DuplicateKey:
    """A key set twice in one mapping: its path and the line of the second occurrence (1-based)."""

    path: str
    line: int


def path_steps(path: str) -> list[str | int]:
    """`spec.containers[0].name` -> ["spec", "containers", 0, "name"]."""
    return [int(index) if index else key for key, index in _STEP.findall(path)]


def line_of(node: yaml.Node | None, path: str) -> int | None:
    """The 1-based line of `path` in a composed document, or of the deepest part of it that exists."""
    if node is None:
        return None
    line = node.start_mark.line + 1
    for step in path_steps(path):
        found = _child(node, step)
        if found is None:
            break
        key, node = found
        line = (key or node).start_mark.line + 1
    return line


def _child(node: yaml.Node, step: str | int) -> tuple[yaml.Node | None, yaml.Node] | None:
    """The (key node, value node) `step` leads to, or None."""
    if isinstance(node, yaml.MappingNode) and isinstance(step, str):
        # the last of equal keys, as the loaded value is the last one
        matches = [(k, v) for k, v in node.value if isinstance(k, yaml.ScalarNode) and k.value == step]
        return matches[-1] if matches else None
    if isinstance(node, yaml.SequenceNode) and isinstance(step, int) and step < len(node.value):
        return None, node.value[step]
    return None


def duplicate_keys(node: yaml.Node | None, prefix: str = "") -> list[DuplicateKey]:
    """Every key a mapping of the document sets more than once, with the server's path notation."""
    found: list[DuplicateKey] = []
    if isinstance(node, yaml.MappingNode):
        seen: set[str] = set()
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else "?"
            path = f"{prefix}.{name}" if prefix else name
            if name in seen:
                found.append(DuplicateKey(path, key.start_mark.line + 1))
            seen.add(name)
            found += duplicate_keys(value, path)
    elif isinstance(node, yaml.SequenceNode):
        for index, item in enumerate(node.value):
            found += duplicate_keys(item, f"{prefix}[{index}]")
    return found
