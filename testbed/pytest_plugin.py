"""pytest fixtures for suites that need a live test bed: setup, assess, teardown.

Options: --backend, --k8s, --layout, --cluster-name; --kubeconfig to use an existing cluster;
--keep-cluster to leave it running afterwards; --reuse-cluster to use a running one of that name.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from hostenv.versions import DEFAULT_MINOR
from testbed.apiviews import ApiViews
from testbed.clusters.base import ClusterSpec
from testbed.clusters.layout import Layout, load_layout
from testbed.clusters.registry import BACKENDS, cluster_for
from testbed.namespaces import create_namespace

DEFAULT_LAYOUT = Path(__file__).resolve().parent.parent / "clusters" / "layouts" / "mixed-h100-b200.yaml"


@dataclass
class TestBed(ApiViews):
    """A live cluster as the suites see it."""

    __test__ = False  # not a test class, despite the name

    name: str
    kubeconfig: Path
    api: client.ApiClient
    layout: Layout | None


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("dra-testbed")
    group.addoption("--backend", default="kwok", choices=sorted(BACKENDS), help="cluster backend")
    group.addoption("--k8s", default=DEFAULT_MINOR, help="Kubernetes minor of the test bed")
    group.addoption("--layout", default=str(DEFAULT_LAYOUT), help="layout file of the test bed")
    group.addoption("--cluster-name", default="dra-testbed-e2e", help="name of the test-bed cluster")
    group.addoption("--kubeconfig", default=None, help="run against this existing cluster instead of bringing one up")
    group.addoption("--keep-cluster", action="store_true", help="leave the cluster running after the session")
    group.addoption("--reuse-cluster", action="store_true", help="use a running cluster of that name if there is one")


def pytest_configure(config: pytest.Config) -> None:
    from testbed import interrupts

    # SIGTERM/SIGHUP (CI runners, `timeout`) end the session like Ctrl-C: session fixtures tear down
    interrupts.install()


@pytest.fixture(scope="session")
def testbed(request: pytest.FixtureRequest) -> Iterator[TestBed]:
    """The session's cluster: brought up once (setup), shared by tests, torn down at the end."""
    opts = request.config.option
    layout = load_layout(opts.layout) if opts.layout else None
    if opts.kubeconfig:
        existing = cluster_for("existing", "existing", opts.kubeconfig)
        kubeconfig = existing.create(ClusterSpec(name="existing", layout=layout))  # checks it serves DRA
        api = existing.api_client()
        yield TestBed("existing", kubeconfig, api, layout)
        api.close()
        return
    cluster = cluster_for(opts.backend, opts.cluster_name)
    reused = opts.reuse_cluster and cluster.status().running
    if reused:
        kubeconfig = cluster.kubeconfig()
    else:
        spec = ClusterSpec(name=opts.cluster_name, k8s=opts.k8s, layout=layout)
        kubeconfig = cluster.create(spec, force=True)
    api = cluster.api_client()
    try:
        yield TestBed(opts.cluster_name, kubeconfig, api, layout)
    finally:
        api.close()
        if not (opts.keep_cluster or reused):
            cluster.delete()


@pytest.fixture
def namespace(testbed: TestBed) -> Iterator[str]:
    """A namespace of the test's own, so tests never see each other's claims and pods."""
    name = f"t-{uuid.uuid4().hex[:10]}"
    create_namespace(testbed.core, name, {"dra-testbed.io/test": "true"})
    yield name
    testbed.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
