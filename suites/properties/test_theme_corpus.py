"""The theme corpus (testbed/workloads/corpus.py) on the properties' beds: explicit cases in every run.

Each case is checked step by step against the model and the boards' real facts; test_faults_bite.py
shows each one failing under the fault it names.
"""

from __future__ import annotations

import pytest

from fake_gpus.driver.identity import current_identity
from suites.properties.conftest import bundle_dir
from testbed.workloads.corpus import VRAM_CASES, VramCase, churn_cases
from testbed.workloads.scenarios import memory_selector, partition_churn

pytestmark = pytest.mark.cluster


@pytest.mark.parametrize("vram", VRAM_CASES, ids=lambda v: f"{v.gib}GiB")
def test_vram_boundary(whole_bed, request, vram: VramCase) -> None:
    """All GPUs of at least N GiB: the board marketed as N GB (a little under N GiB) is left out."""
    memory_selector(whole_bed.api, whole_bed.layout_yaml, bundle_dir(whole_bed, request), vram.case, current_identity().gpu_class)


def test_mig_density_and_fallback(dynamic_bed, dynamic_nodes, request) -> None:
    """Per partitionable node: pack full, release, repack; then fallback while the board fills up."""
    for corpus_case in churn_cases(dynamic_nodes):
        partition_churn(dynamic_bed.api, dynamic_bed.layout_yaml, bundle_dir(dynamic_bed, request) / corpus_case.name, corpus_case.case)
