"""Replay bundles as files: a failing workload written down (running one again is replay.py).

A bundle directory holds `bundle.json` (its format version), `layout.yaml` (the cluster), `steps.json` (what the runner did, in order:
enough to replay), `manifests.yaml` (the objects, for a human with kubectl), `violations.json`
(expected vs observed per broken property), `observed.json` (pods, claims, slices at failure) and
`context.json` (driver faults in force and the like).
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import yaml

from testbed.clusters.layout import Layout, load_layout
from testbed.workloads.bundle_schema import check_context, check_steps, read_json
from testbed.workloads.steps import Step, from_json

BUNDLE_ROOT_ENV = "DRA_TESTBED_BUNDLES"
# 2: MIG device names as NVIDIA's driver gives them (gpu-<minor>-mig-<profile>-<profile id>-<start>);
# format 1 bundles (no bundle.json) name devices gpu-<minor>-mig-<profile>-<start>[-<end>] and cannot replay.
FORMAT = 2
FILES = ("bundle.json", "layout.yaml", "steps.json", "manifests.yaml", "violations.json", "observed.json", "context.json")


def default_root() -> Path:
    """Where failing examples leave their bundles: $DRA_TESTBED_BUNDLES or ./.dra-testbed/bundles."""
    return Path(os.environ.get(BUNDLE_ROOT_ENV) or Path.cwd() / ".dra-testbed" / "bundles")


def layout_yaml(layout: Layout) -> str:
    """A layout as the YAML `load_layout` reads."""
    nodes = [{"name": n.name, "board": n.board, "count": n.count, "mode": str(n.mode)} for n in layout.nodes]
    return yaml.safe_dump({"name": layout.name, "nodes": nodes}, sort_keys=False)


def layout_from_nodes(core) -> Layout:
    """The layout of a running test-bed cluster, read off the labels our backends put on GPU nodes."""
    from fake_gpus.node import BOARD_LABEL, hardware_from_labels
    from testbed.clusters.layout import NodeSpec

    nodes = []
    for node in core.list_node(label_selector=BOARD_LABEL).items:
        hardware = hardware_from_labels(node.metadata.labels)  # all of the mode: a static node's layout too
        nodes.append(NodeSpec(node.metadata.name, hardware.board, hardware.count, hardware.mode))
    return Layout(tuple(sorted(nodes, key=lambda n: n.name)), name="observed")


def write_bundle(directory: Path, *, layout_yaml: str, steps: list[Step], manifests: list[dict], violations: list[dict],
                 observed: dict, context: dict) -> Path:
    """Replace `directory` with a bundle of this failure (the last failure wins: Hypothesis replays the
    shrunk example last, so that is what stays)."""
    tmp = directory.with_name(directory.name + f".tmp-{uuid.uuid4().hex[:6]}")
    tmp.mkdir(parents=True)
    (tmp / "bundle.json").write_text(json.dumps({"format": FORMAT}) + "\n")
    (tmp / "layout.yaml").write_text(layout_yaml)
    (tmp / "steps.json").write_text(json.dumps([step.to_json() for step in steps], indent=2) + "\n")
    (tmp / "manifests.yaml").write_text(yaml.safe_dump_all(manifests, sort_keys=False))
    (tmp / "violations.json").write_text(json.dumps(violations, indent=2, default=str) + "\n")
    (tmp / "observed.json").write_text(json.dumps(observed, indent=1, default=str) + "\n")
    (tmp / "context.json").write_text(json.dumps(context, indent=2, default=str) + "\n")
    if directory.exists():
        shutil.rmtree(directory)
    tmp.rename(directory)
    return directory


def load_bundle(directory: Path) -> tuple[Layout, list[Step], dict]:
    """Layout, steps and context of a bundle, each checked before anything starts; ValueError (one line)
    naming the file and the problem."""
    for name in ("layout.yaml", "steps.json"):
        if not (directory / name).is_file():
            raise ValueError(f"{directory} is not a replay bundle: {name} is missing; valid: a directory a failing "
                             f"property wrote ({', '.join(FILES)})")
    version = bundle_format(directory)
    if version != FORMAT:
        raise ValueError(f"{directory} is a format {version} replay bundle; this dra-testbed replays format {FORMAT} "
                         "only (MIG devices were renamed as NVIDIA's driver names them): record the failure again")
    context = check_context(read_json(directory / "context.json", {}), str(directory / "context.json"))
    steps = check_steps(read_json(directory / "steps.json"), str(directory / "steps.json"))
    return load_layout(directory / "layout.yaml"), [from_json(step) for step in steps], context


def bundle_format(directory: Path) -> int:
    """The format version of a bundle (1: written before bundle.json existed)."""
    try:
        return int(json.loads((directory / "bundle.json").read_text())["format"])
    except FileNotFoundError:
        return 1
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{directory / 'bundle.json'}: not a bundle header ({type(exc).__name__}: {str(exc)[:80]}); "
                         f"valid: {json.dumps({'format': FORMAT})}") from exc
