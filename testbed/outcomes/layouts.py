"""The fleet a `try` runs on, described the way operators describe theirs: a layout file, the name of one in
clusters/layouts/, or `--node NAME=BOARD:COUNT:MODE` flags as `dra-testbed up` takes them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Sequence

from testbed.clusters.layout import Layout, LayoutError, from_flags, load_layout

LAYOUTS = Path(__file__).resolve().parents[2] / "clusters" / "layouts"


def named_layout(text: str) -> Layout:
    """A layout file, or the name of one in clusters/layouts/ (e.g. `mixed-h100-b200`)."""
    path = Path(text)
    if not path.is_file() and (LAYOUTS / f"{text}.yaml").is_file():
        path = LAYOUTS / f"{text}.yaml"
    if not path.is_file():
        known = ", ".join(sorted(p.stem for p in LAYOUTS.glob("*.yaml")))
        raise LayoutError(f"no fleet layout {text!r}: give a layout file, one of {known}, or --node NAME=BOARD:COUNT:MODE flags")
    return load_layout(path)


def fleet_layout(fleet: str | None, nodes: Sequence[str] = ()) -> Layout:
    """The layout of `--fleet` or of `--node` flags (one of the two); LayoutError (bad input) otherwise."""
    if fleet and nodes:
        raise LayoutError("give either --fleet LAYOUT or --node flags, not both")
    if fleet:
        return named_layout(fleet)
    if not nodes:
        raise LayoutError("no fleet: give --fleet LAYOUT (a file or a name in clusters/layouts/) or --node NAME=BOARD:COUNT:MODE flags")
    layout = from_flags(list(nodes))
    # named by its nodes, so that the same flags find the same bed again (bed names come from layout names)
    return Layout(layout.nodes, name="nodes-" + "-".join(n.name for n in layout.nodes))
