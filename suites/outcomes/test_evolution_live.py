"""`try --compare` across the four generation fleets (clusters/layouts/fleet-a100 -> fleet-h100 -> fleet-b200 ->
fleet-b300) on live beds: which pod keeps its board, moves to a newer one, or starts pending, with the reason."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml

from hostenv.processes import run_child

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

# Three pods as a team writes them: any GPU, one with at least 100Gi, and one pinned to the A100 by product name.
SELECTORS = {"any": None, "big": "device.capacity['gpu.nvidia.com'].memory.compareTo(quantity('100Gi')) >= 0",
             "a100-pinned": "device.attributes['gpu.nvidia.com'].productName == 'NVIDIA A100-SXM4-80GB'"}


def team_manifest() -> list[dict]:
    """Per pod a ResourceClaimTemplate for one gpu.nvidia.com device (with its selector) and the pod using it."""
    objects: list[dict] = []
    for name, cel in SELECTORS.items():
        exactly: dict = {"deviceClassName": "gpu.nvidia.com", **({"selectors": [{"cel": {"expression": cel}}]} if cel else {})}
        objects.append({"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
                        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}}})
        objects.append({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/cuda:12", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}]}})
    return objects


def test_four_generations_in_one_table(request, tmp_path: Path) -> None:
    manifest = tmp_path / "team.yaml"
    manifest.write_text(yaml.safe_dump_all(team_manifest()))
    out = run_child([sys.executable, "-m", "testbed.cli", "try", str(manifest), "--fleet", "fleet-a100",
                     "--compare", "fleet-h100,fleet-b200", "--compare", "fleet-b300", "--k8s", request.config.option.k8s,
                     "-o", "json", "--timeout", "60"], capture_output=True, text=True, timeout=900)
    assert out.returncode == 1, out.stderr  # pods stay pending on some fleet
    report = json.loads(out.stdout)
    assert [f["fleet"] for f in report["fleets"]] == ["fleet-a100", "fleet-h100", "fleet-b200", "fleet-b300"]
    rows = {r["pod"]: r for r in report["evolution"]}
    kinds = {pod: [s["kind"] for s in row["steps"]] for pod, row in rows.items()}
    assert kinds["any"] == ["moves", "moves", "moves"]
    boards = [f["board"] for f in rows["any"]["fleets"]]
    assert boards[:3] == ["a100-80gb", "h100-80gb", "b200-180gb"] and boards[3] in ("b300-288gb", "gb300-288gb")  # B300 fleet has a GB300 tray
    assert kinds["big"] == ["stays pending", "schedules", "moves"]
    assert kinds["a100-pinned"] == ["starts pending", "stays pending", "stays pending"]
    assert "NVIDIA A100-SXM4-80GB" in rows["a100-pinned"]["steps"][0]["text"]  # the reason names what it asked for
