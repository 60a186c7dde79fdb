"""The chart's values for a layout: each node's contract labels (the node codec, not the chart's templates,
so the labels are the ones our beds put on their nodes) and the layout's YAML for the fleet's ConfigMap."""

from __future__ import annotations

import yaml

from fake_gpus.machine.provision import node_labels
from testbed.clusters.fleet_labels import FLEET_LAYOUT_LABEL, FLEET_RELEASE_LABEL
from testbed.clusters.layout import Layout

CHART_DIR_NAME = "dra-fake-gpus"
DEFAULT_RELEASE = "fake-gpus"
DEFAULT_NAMESPACE = "dra-fake-gpus"
RELEASE_LABEL = FLEET_RELEASE_LABEL  # on every object of a release, fake nodes included
LAYOUT_LABEL = FLEET_LAYOUT_LABEL  # on the ConfigMap that holds a release's layout


def layout_yaml(layout: Layout) -> str:
    """The layout as a layout file (clusters/layouts/*.yaml), one entry per node."""
    nodes = []
    for node in layout.nodes:
        entry: dict = {"name": node.name, "board": node.board, "count": node.count, "mode": node.mode.kind}
        if node.mode.mig_layout:
            entry["mode"] = f"static-mig:{node.mode.mig_layout}"
        if node.mode.shares:
            entry["consumableShares"] = node.mode.shares
        if node.mode.health:
            entry["healthCheck"] = True
        nodes.append(entry)
    return yaml.safe_dump({"name": layout.name, "nodes": nodes}, sort_keys=False)


def _image(reference: str) -> dict:
    repository, _, tag = reference.rpartition(":")
    return {"image": {"repository": repository, "tag": tag, "pullPolicy": "IfNotPresent"}}


def chart_values(layout: Layout, image: str | None = None, device_classes: bool = True, kwok_image: str | None = None) -> dict:
    """Values for the chart: the layout's nodes with their labels, the layout text, the publisher and KWOK
    controller images (`repository:tag`; None keeps the chart's default)."""
    values: dict = {"nodes": [{"name": n.name, "labels": node_labels(n.hardware)} for n in layout.nodes],
                    "layout": layout_yaml(layout), "deviceClasses": {"create": device_classes}}
    if image:
        values["publisher"] = _image(image)
    if kwok_image:
        values["kwok"] = _image(kwok_image)
    return values
