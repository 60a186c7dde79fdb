"""`dra-testbed density` in sharing modes on a real KWOK bed: pods share GPUs, and the report counts them once.

Consumable capacity needs 1.35's allocator (1.34.4 misjudges shares), so these run with the tests of the second
minor (`nox -s second-minor`), as suites/properties/test_sharing_machine.py does; the sharing claims themselves
are checked against the allocator's rules in test_density_sharing.py on every run.
"""

from __future__ import annotations

import json
import uuid
import pytest

from suites.density.test_density_live import DATA, density

pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.second_minor]
MODES = "whole,whole:shares=memory,whole:shares=10"
SHARING_MINOR = "1.35"


@pytest.fixture(scope="module")
def shared_report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    work = tmp_path_factory.mktemp("density-sharing")
    fleet = work / "fleet.yaml"
    fleet.write_text("name: two-h100\nnodes:\n  - {name: h100, board: h100-80gb, count: 8, replicas: 2}\n")
    out = density("--trace", str(DATA / "default-head60.csv"), "--fleet", str(fleet), "--modes", MODES, "--k8s", SHARING_MINOR,
                  "--scheduler-profile", "packing", "--report", str(work / "report"), "--name", f"dens-sh-{uuid.uuid4().hex[:6]}")
    assert out.returncode == 0, out.stderr[-3000:]
    return json.loads((work / "report" / "density.json").read_text())


def test_shared_gpus_hold_several_pods_and_count_once(shared_report: dict) -> None:
    """Single-GPU pods placed beyond the GPUs in use can only be pods sharing a GPU; whole GPUs never allow it."""
    doc = shared_report
    assert doc["kubernetes"] == SHARING_MINOR and doc["scheduler_profile"] == "packing"
    whole = doc["modes"]["whole"]
    # the one 8-GPU pod makes placed <= GPUs in use certain in whole mode
    assert all(s["placed"] <= s["gpus_in_use"] for s in whole["samples"])
    for mode in MODES.split(",")[1:]:
        data = doc["modes"][mode]
        assert len(data["pods"]) == 55 and data["samples"][-1]["gpus_in_use"] == 0, mode
        assert any(s["placed"] > s["gpus_in_use"] for s in data["samples"]), f"{mode}: no GPU ever held two pods"
        assert max(s["gpus_in_use"] for s in data["samples"]) <= 16
        assert data["summary"]["placed"] >= whole["summary"]["placed"], mode
        assert data["summary"]["mean_stranded_compute"] < whole["summary"]["mean_stranded_compute"], mode
        assert all(d == "gpu" for p in data["pods"] for d in p["devices"])

