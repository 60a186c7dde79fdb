"""The verdicts each driver under test is expected to get from the sharing, NVML-state and health checks on a KWOK bed.

NVIDIA's plugin runs as a deployment of its chart has it: the gates the layout needs (DynamicMIG, ConsumableShares
with --consumable-shares) and no others, so TimeSlicingSettings (alpha, off by default) is off and it refuses a
TimeSlicing GpuConfig at prepare (docs/design/sharing.md, "NVIDIA's feature gates on the bed"). Any other verdict
is a change in NVIDIA's binary or in our checks, to be looked at either way. The health node's plugin runs with
NVMLDeviceHealthCheck (its mode ends :health); NVIDIA's lifts no taint until it restarts, so it fails health.heal
(a SHOULD; docs/design/health.md, "Conformance checks").
"""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.clusters.driver import parse_driver
from testbed.clusters.layout import load_layout
from testbed.conformance.beds import kwok_bed
from testbed.conformance.checks import CHECKS as CHECKS_TABLE
from testbed.conformance.outcome import FAIL, NOT_RUN, PASS
from testbed.conformance.run import run_checks

pytestmark = [pytest.mark.cluster]

# one sharing H100, one partitionable H100 and two H100 with health checks: what these checks look at, and nothing
# more (seconds per run)
LAYOUT = """name: sharing-dynamic-mig-health
nodes:
  - {name: dyn-h100, board: h100-80gb, count: 1, mode: dynamic-mig}
  - {name: share-h100, board: h100-80gb, count: 1, mode: whole, consumableShares: memory}
  - {name: health-h100, board: h100-80gb, count: 2, mode: whole, healthCheck: true}
"""
HEALTH = ("health.fatal-xid-taints", "health.lost-gpu", "health.heal", "health.ignored-xid")  # in table order
CHECKS = ("shares.published", "sched.shared-capacity", "node.time-slicing", "node.nvml-state", *HEALTH)
# check -> (verdict, a phrase its message must hold)
EXPECTED: dict[str, dict[str, tuple[str, str]]] = {
    "ours": {c: (PASS, "") for c in CHECKS},
    "nvidia": {**{c: (PASS, "") for c in CHECKS},
               "node.time-slicing": (NOT_RUN, 'but the "TimeSlicingSettings" feature gate is not enabled'),
               "health.heal": (FAIL, "still carries")},
}


@pytest.mark.parametrize("driver", sorted(EXPECTED))
def test_each_driver_gets_its_expected_verdicts(driver: str, request, tmp_path: Path) -> None:
    if driver == "nvidia":
        from suites.nvidia.conftest import required_plugin

        spec = parse_driver(driver, binary=str(required_plugin(request.config)))
    else:
        spec = parse_driver(driver)
    (tmp_path / "layout.yaml").write_text(LAYOUT)
    with kwok_bed(load_layout(tmp_path / "layout.yaml"), request.config.option.k8s, spec) as (subject, _):
        outcomes = run_checks([c for c in CHECKS_TABLE if c.id in CHECKS], subject, tmp_path / "report")
    seen = {o.id: (o.verdict, o.message) for o in outcomes}
    for check, (verdict, phrase) in EXPECTED[driver].items():
        assert seen[check][0] == verdict and phrase in seen[check][1], f"{driver} {check}: {seen[check]}"
