"""A Hopper-only bed (KWOK unless --backend) (clusters/layouts/h100-only.yaml) for the apply/settle/explain suite."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from testbed.clusters.layout import Layout, load_layout

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "clusters" / "examples"
H100_ONLY = REPO / "clusters" / "layouts" / "h100-only.yaml"


class HopperBed:
    """The bed as the tests see it: an API client, its layout and minor."""

    def __init__(self, api: client.ApiClient, layout: Layout, minor: str) -> None:
        self.api, self.layout, self.minor = api, layout, minor


@pytest.fixture(scope="module")
def hopper_bed(request: pytest.FixtureRequest) -> Iterator[HopperBed]:
    minor = request.config.option.k8s
    layout = load_layout(H100_ONLY)
    with request.getfixturevalue("bed")(layout, label="dra-testbed-outcomes") as testbed:
        yield HopperBed(testbed.api, layout, minor)
