"""`try` on a kustomization and a Helm chart together, on a live Hopper-only bed: the overlay's patched device
count and the chart's `--set` value are what the scheduler allocates."""

from __future__ import annotations

import pytest

from hostenv.versions import release_for
from testbed.outcomes.documents import load
from testbed.outcomes.inputs import HelmChart, Kustomization
from testbed.outcomes.run import run_manifests

from .conftest import HopperBed
from .test_try_rendered import CHART, OVERLAY

pytestmark = pytest.mark.cluster


@pytest.mark.helm
def test_an_overlay_and_a_chart_schedule_with_the_counts_they_render(hopper_bed: HopperBed) -> None:
    chart = HelmChart(CHART, settings=("gpus=4",), kube_version=release_for(hopper_bed.minor).kubernetes)
    result = run_manifests(hopper_bed.api, load([Kustomization(OVERLAY), chart]), fleet="h100-only", minor=hopper_bed.minor)
    pods = {p.name: p for p in result.pods}
    assert {name: (p.verdict, len(p.allocations)) for name, p in pods.items()} == {
        "inference": ("scheduled", 2),  # the overlay's patch: 2, not the base's 1
        "try-trainer": ("scheduled", 4),  # --set gpus=4 over the chart's default 1
    }
    (claim,) = (c for c in result.claims if c.name == "shared-gpus")
    assert claim.verdict == "allocated" and claim.pods == ["inference"]
    assert result.ok and not result.warnings
