"""Replay bundles carry a format version; bundles from before NVIDIA's device names are refused in one line."""

from __future__ import annotations

import json
from pathlib import Path

from testbed.cli.main import main
from testbed.workloads.bundle import FORMAT, bundle_format, load_bundle, write_bundle

LAYOUT = "name: t\nnodes:\n- {name: n0, board: h100-80gb, count: 1, mode: dynamic-mig}\n"


def test_new_bundles_load_and_old_ones_are_refused(tmp_path: Path, capsys) -> None:
    new = write_bundle(tmp_path / "new", layout_yaml=LAYOUT, steps=[], manifests=[], violations=[], observed={}, context={})
    assert bundle_format(new) == FORMAT == 2
    layout, steps, _ = load_bundle(new)
    assert layout.nodes[0].name == "n0" and steps == []

    old = tmp_path / "old"
    old.mkdir()
    (old / "layout.yaml").write_text(LAYOUT)
    (old / "steps.json").write_text(json.dumps([{"claim": "gpu-0-mig-3g40gb-4-7"}]))
    assert main(["replay", str(old)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "format 1 replay bundle" in err[0] and "record the failure again" in err[0], err
