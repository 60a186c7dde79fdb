"""The chart's README, generated from values.yaml: its `# --` comments are the descriptions.

    python -m testbed.install.readme     # rewrites charts/dra-fake-gpus/README.md
"""

from __future__ import annotations

import sys
from pathlib import Path

import yaml

HEADER = """# dra-fake-gpus

Fake NVIDIA GPU nodes for Kubernetes DRA in any cluster: KWOK-managed Nodes whose ResourceSlices are the
ones NVIDIA's driver publishes, written by dra-testbed's publisher. Install it with `dra-testbed install`
(docs/user/install.md), which fills `nodes` and `layout` from a layout file, or with helm directly.
This file is generated from values.yaml by `python -m testbed.install.readme`.

| Key | Default | Description |
|-----|---------|-------------|
"""


def _rows(lines: list[str]) -> list[tuple[str, str]]:
    """(dotted key, description) for every key preceded by `# --` comment lines."""
    rows, path, comment, in_comment = [], [], [], False
    for line in lines:
        stripped = line.strip()
        if stripped.startswith("# --"):
            comment, in_comment = [stripped[4:].strip()], True
        elif stripped.startswith("#") and in_comment:
            comment.append(stripped[1:].strip())
        elif stripped and not stripped.startswith("-") and ":" in stripped:
            depth = (len(line) - len(line.lstrip())) // 2
            path = path[:depth] + [stripped.split(":", 1)[0]]
            if comment:
                rows.append((".".join(path), " ".join(comment)))
            comment, in_comment = [], False
    return rows


def _value(values: dict, dotted: str) -> object:
    for key in dotted.split("."):
        values = values[key]
    return values


def chart_readme(chart: Path) -> str:
    text = (chart / "values.yaml").read_text()
    values = yaml.safe_load(text)
    table = "".join(f"| `{key}` | `{yaml.safe_dump(_value(values, key), default_flow_style=True).strip().removesuffix('...').strip()}` | {doc} |\n"
                    for key, doc in _rows(text.splitlines()))
    return HEADER + table


if __name__ == "__main__":
    from testbed.install.release import CHART

    (CHART / "README.md").write_text(chart_readme(CHART))
    sys.exit(0)
