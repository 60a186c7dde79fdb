"""clusters/examples/sharing on the sharing-demo fleet, with our driver and with NVIDIA's: placement as NVIDIA's
consumable-shares demo and sharing quickstarts document it, and the shared claims prepared on the node.

NVIDIA's demo (demo/specs/consumable-shares in its repository) says two replicas asking a share of a GPU run on the
same GPU; ours are manifests of the same shape, each pinned to the fleet's node sharing the way it names. Both
drivers must give each pair one device, allocated as shares (a shareID per claim, 4Gi consumed where 4Gi is
asked), and the stand-in kubelet must prepare every replica's claim through the driver's plugin. The TimeSlicing
and MPS examples land on the whole-GPU node; their strategies are prepared only by ours here (NVIDIA's plugin on
this bed runs without its TimeSlicingSettings and MPSSupport gates, as its chart ships; suites/nvidia/
test_sharing_cdi_parity runs it with them).
"""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from suites.nvidia.conftest import required_plugin
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import load_layout
from testbed.drivers.nvidia.plugin import DRIVER
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.outcomes.manifests import load
from testbed.outcomes.run import RunResult, run_manifests

from .conftest import EXAMPLES, REPO

pytestmark = pytest.mark.cluster
FLEET = REPO / "clusters" / "layouts" / "sharing-demo.yaml"
SHARED = {"Deployment/by-memory": "share-memory", "Deployment/unlimited": "share-unlimited", "Deployment/counted": "share-four"}


def wait_prepared(api: client.ApiClient, pods: list[tuple[str, str]], timeout: float = 60.0) -> None:
    """Until the stand-in kubelet has prepared every (namespace, name) pod's claims."""
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    for namespace, name in pods:
        while (core.read_namespaced_pod(name, namespace).metadata.annotations or {}).get(PREPARED_ANNOTATION) != "true":
            assert time.monotonic() < deadline, f"pod {namespace}/{name}: claims not prepared in {timeout:.0f}s"
            time.sleep(0.3)


@pytest.mark.parametrize("driver", ["ours", "nvidia"])
def test_sharing_examples_land_as_nvidia_documents(request, bed, driver: str) -> None:
    spec = DriverSpec("nvidia", DRIVER, path=str(required_plugin(request.config))) if driver == "nvidia" else None
    layout = load_layout(FLEET)
    with bed(layout, spec, label=f"sharing-demo-{driver}") as tb:
        result: RunResult = run_manifests(tb.api, load([EXAMPLES / "sharing"]), fleet=layout.name, keep=True)
        assert result.settled and all(p.verdict == "scheduled" for p in result.pods), [(p.name, p.verdict, p.reasons) for p in result.pods]
        resource = client.ResourceV1Api(tb.api)
        for owner, node in SHARED.items():
            replicas = [p for p in result.pods if p.owner == owner]
            held = {(a.node, a.device) for p in replicas for a in p.allocations}
            assert len(replicas) == 2 and held == {(node, "gpu-0")}, (owner, held)  # two replicas, one GPU
            for a in (a for p in replicas for a in p.allocations):
                (r,) = resource.read_namespaced_resource_claim(a.claim, replicas[0].namespace).status.allocation.devices.results
                assert r.share_id, f"{owner}: {a.claim} allocated whole, not as a share"
                if owner == "Deployment/by-memory":
                    assert r.consumed_capacity == {"memory": "4Gi"}, r.consumed_capacity
            for pod, other in zip(replicas, reversed(replicas)):  # try names the other replica and what it took
                (shown,) = pod.allocations
                assert shown.share and f"with {other.name}" in shown.share, (owner, shown.share)
                if owner == "Deployment/by-memory":
                    assert shown.share.startswith("shared: took memory 4Gi;") and "left memory 71.6Gi" in shown.share, shown.share
        sliced = [p for p in result.pods if p.name.startswith("sliced-")]
        assert len({(a.node, a.device, a.claim) for p in sliced for a in p.allocations}) == 1  # one claim, one GPU
        assert {p.node for p in result.pods if p.name in ("sliced-a", "sliced-b", "mps-pair")} == {"strategies"}
        shared_pods = [(p.namespace, p.name) for p in result.pods if p.owner in SHARED]
        wait_prepared(tb.api, shared_pods + ([(p.namespace, p.name) for p in result.pods if p.owner == ""] if driver == "ours" else []))
