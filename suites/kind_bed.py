"""The session's kind bed: one kind cluster per session with real kubelets and our images loaded, shared by
the kind suite (suites/kind) and the kind fault matrix's smoke rows (suites/conformance): a second bed made
every CI run 2.3 minutes longer. A plugin of the root conftest, so that both get the same session fixture.

It needs Docker (started from Debian's docker.io when not running) and takes minutes; `-m "not kind"` leaves
out the tests that use it.
`--keep-cluster` leaves the cluster up afterwards; `--reuse-cluster` uses a running one of that name.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from testbed.clusters.base import ClusterError
from testbed.clusters.kind import KindCluster
from testbed.clusters.layout import from_flags
from testbed.pytest.plugin import ApiViews

# $DRA_TESTBED_KIND_CLUSTER names the cluster exactly; else it is this plus a random suffix (this alone with
# --keep-cluster or --reuse-cluster), so two sessions at the same time never meet
CLUSTER_NAME = os.environ.get("DRA_TESTBED_KIND_CLUSTER")
CLUSTER_LABEL = "dra-kind-e2e"
# H100 80GB nodes in each driver mode: whole GPUs (two, so that a container seeing a GPU it was not given
# shows: the kind fault matrix's cdi-all-devices row), dynamic MIG, and a static layout of seven 1g.10gb
LAYOUT_FLAGS = ["gpu-whole=h100-80gb:2:whole", "gpu-mig=h100-80gb:1:dynamic-mig",
                "gpu-static=h100-80gb:1:static-mig:all-1g.10gb"]


@dataclass
class KindBed(ApiViews):
    """The session's kind cluster as tests see it."""

    cluster: KindCluster
    api: client.ApiClient
    workload_image: str

    def worker(self, layout_node: str) -> str:
        """Kubernetes node name of the worker standing for `layout_node`."""
        nodes = self.core.list_node(label_selector=f"dra-testbed.io/layout-node={layout_node}").items
        assert nodes, f"no worker labelled for layout node {layout_node}"
        return nodes[0].metadata.name

    def state_dir(self, layout_node: str) -> Path:
        """Host path of the fake-NVML state directory of `layout_node`."""
        return self.cluster.home / "nodes" / layout_node / "nvml"


@pytest.fixture(scope="session")
def kind_bed(request: pytest.FixtureRequest) -> Iterator[KindBed]:
    from testbed.host.docker.dockerd import engine_running, stop_engine_if_idle
    from testbed.host.docker.dockerd import DockerError
    from testbed.host.hostdeps import HostDepsMissing
    from testbed.clusters.kind.images.node_image import ImageBuildError
    from testbed.clusters.kind.images.driver_image import ensure_workload_image
    from testbed.clusters.kind.images.rootfs import RootfsError

    engine_was_running = engine_running()  # a dockerd this session starts is stopped again at its end
    bed = request.getfixturevalue("bed")
    failed_before = request.session.testsfailed
    try:
        try:
            workload = ensure_workload_image()  # before the bed: a failed build leaves nothing running
            with bed(from_flags(LAYOUT_FLAGS), name=CLUSTER_NAME, label=CLUSTER_LABEL, backend="kind", images=(workload,),
                     workers_only=True, on_failure_logs=True) as testbed:
                try:
                    yield KindBed(testbed.cluster, testbed.api, workload)
                finally:
                    if request.session.testsfailed > failed_before:
                        testbed.handle.failed = True  # its logs are exported before it goes
        except (ClusterError, HostDepsMissing, ImageBuildError, DockerError, RootfsError) as exc:
            # one line, raised once and shown for every kind test: no stack of errors for a missing package
            pytest.fail(f"kind test bed: {exc}", pytrace=False)
    finally:
        if not engine_was_running:
            stop_engine_if_idle()
