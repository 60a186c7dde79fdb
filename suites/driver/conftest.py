"""Fixtures for the driver suite: KWOK clusters of our own (names `drv-...`), torn down unless --keep-cluster."""

from __future__ import annotations

import uuid
from contextlib import contextmanager
from typing import Iterator

import pytest
from kubernetes import client

from testbed.clusters.layout import Layout, parse_node_flag
from testbed.kube.namespaces import create_namespace
from testbed.pytest.plugin import BedFactory, TestBed


@contextmanager
def driver_cluster(bed: BedFactory, label: str, nodes: list[str], env: dict[str, str] | None = None,
                   minor: str | None = None) -> Iterator[TestBed]:
    """A KWOK cluster (its publisher's files are what these tests inspect) of `minor` (default: --k8s) with
    `--node`-style `nodes`; `env` reaches the publisher (fault switches)."""
    layout = Layout(tuple(parse_node_flag(n) for n in nodes), name=f"drv-{label}")
    with bed(layout, env=env, backend="kwok", k8s=minor) as testbed:
        yield testbed


# The scheduling cluster: whole GPUs of two products, a static MIG node, dynamic H100 nodes.
SCHEDULING_NODES = [
    "whole-h100=h100-80gb:2:whole",
    "whole-b200=b200-180gb:2:whole",
    "static-h100=h100-80gb:1:static-mig:all-balanced",
    "dyn-h100=h100-80gb:1:dynamic-mig",
    "dyn-check=h100-80gb:1:dynamic-mig",
    "dyn-check2=h100-80gb:1:dynamic-mig",
]


@pytest.fixture(scope="session")
def scheduling_bed(bed: BedFactory) -> Iterator[TestBed]:
    with driver_cluster(bed, "scheduling", SCHEDULING_NODES) as testbed:
        yield testbed


@pytest.fixture
def bed_namespace(request: pytest.FixtureRequest) -> Iterator[tuple[TestBed, str]]:
    """A fresh namespace on the bed named by the test's `bed` parameter fixture."""
    bed: TestBed = request.getfixturevalue("scheduling_bed")
    name = f"t-{uuid.uuid4().hex[:10]}"
    create_namespace(bed.core, name)
    yield bed, name
    bed.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
