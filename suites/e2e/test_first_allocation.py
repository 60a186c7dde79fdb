"""First end-to-end DRA allocations on the test bed: the real scheduler picks devices from our slices."""

from __future__ import annotations

import uuid

import pytest

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import current_identity
from testbed.pytest.plugin import TestBed
from testbed.kube.waiting import wait_for

pytestmark = pytest.mark.cluster

GIB_MIB = 1024
IDENTITY = current_identity()


def claim_template(name: str, selector: str, count: int = 1) -> dict:
    """A ResourceClaimTemplate asking for `count` GPUs of the gpu class that satisfy the CEL `selector`."""
    request = {"name": "gpu", "exactly": {"deviceClassName": IDENTITY.gpu_class, "count": count,
                                          "selectors": [{"cel": {"expression": selector}}]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def pod_with_claim(name: str, template: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "containers": [{"name": "main", "image": "registry.invalid/none:0", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def memory_at_least(gib: int) -> str:
    return f"device.capacity['{IDENTITY.driver}'].memory.compareTo(quantity('{gib}Gi')) >= 0"


def product_is(product: str) -> str:
    return f"device.attributes['{IDENTITY.driver}'].productName == '{product}'"


def scheduled(pod) -> bool:
    return bool(pod.spec.node_name)


def unschedulable(pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in (pod.status.conditions or []))


def claim_of(bed: TestBed, namespace: str, pod_name: str):
    """The ResourceClaim generated for the pod's `gpu` template claim, once the pod status names it."""
    pod = wait_for(bed.core.list_namespaced_pod, lambda p: bool(p.status.resource_claim_statuses),
                   namespace=namespace, name=pod_name, what=f"pod {pod_name} to get its claim")
    claim_name = pod.status.resource_claim_statuses[0].resource_claim_name
    return bed.resource.read_namespaced_resource_claim(claim_name, namespace)


def start_pod(bed: TestBed, namespace: str, selector: str, count: int = 1) -> str:
    suffix = uuid.uuid4().hex[:6]
    bed.resource.create_namespaced_resource_claim_template(namespace, claim_template(f"tmpl-{suffix}", selector, count))
    bed.core.create_namespaced_pod(namespace, pod_with_claim(f"pod-{suffix}", f"tmpl-{suffix}"))
    return f"pod-{suffix}"


def nodes_with(bed: TestBed, predicate) -> dict[str, int]:
    """Layout nodes whose board satisfies `predicate`, with their GPU counts."""
    assert bed.layout is not None, "this suite needs --layout describing the cluster"
    return {n.name: n.count for n in bed.layout.nodes if predicate(get_board(n.board))}


def test_claim_for_100gi_gpu_lands_on_the_b200_node(testbed: TestBed, namespace: str, record_proof) -> None:
    # setup: which nodes carry a GPU of at least 100 GiB, according to the catalog
    big = nodes_with(testbed, lambda b: b.memory_mib >= 100 * GIB_MIB)
    small = nodes_with(testbed, lambda b: b.memory_mib < 100 * GIB_MIB)
    assert big and small, "the layout must mix GPUs above and below 100 GiB"
    # assess
    pod_name = start_pod(testbed, namespace, memory_at_least(100))
    pod = wait_for(testbed.core.list_namespaced_pod, scheduled, namespace=namespace, name=pod_name, what="scheduling")
    assert pod.spec.node_name in big
    assert get_board(testbed.layout.node(pod.spec.node_name).board).architecture == "blackwell"
    claim = claim_of(testbed, namespace, pod_name)
    results = claim.status.allocation.devices.results
    assert len(results) == 1
    assert results[0].driver == IDENTITY.driver
    assert results[0].pool == pod.spec.node_name  # one pool per node: the device is that node's
    assert claim.status.reserved_for[0].name == pod_name
    node_slice = next(s for s in testbed.resource.list_resource_slice().items if s.spec.node_name == pod.spec.node_name)
    assert results[0].device in {d.name for d in node_slice.spec.devices}
    record_proof("claim", "1 GPU, memory >= 100Gi")
    record_proof("landed", f"{pod.spec.node_name} {results[0].device} ({testbed.layout.node(pod.spec.node_name).board})")


def test_claim_for_more_h100s_than_a_node_has_stays_pending(testbed: TestBed, namespace: str, record_proof) -> None:
    h100 = get_board("h100-80gb")
    nodes = nodes_with(testbed, lambda b: b.key == h100.key)
    assert nodes, "the layout must have H100 nodes"
    too_many = max(nodes.values()) + 1
    pod_name = start_pod(testbed, namespace, product_is(h100.product_name), count=too_many)
    pod = wait_for(testbed.core.list_namespaced_pod, unschedulable, namespace=namespace, name=pod_name,
                   what="the scheduler to report the pod unschedulable")
    assert not pod.spec.node_name
    message = next(c.message for c in pod.status.conditions if c.type == "PodScheduled")
    assert "cannot allocate all claims" in message, message
    claim = claim_of(testbed, namespace, pod_name)
    assert claim.status.allocation is None
    record_proof("claim", f"{too_many} x {h100.product_name} in one claim")
    record_proof("landed", "pending: " + message.split(".")[0])


def test_deleting_a_pod_frees_its_devices_for_the_next(testbed: TestBed, namespace: str, record_proof) -> None:
    big = nodes_with(testbed, lambda b: b.memory_mib >= 100 * GIB_MIB)
    assert len(big) == 1, "this check needs exactly one node with GPUs of 100 GiB or more"
    (node, count), = big.items()
    first = start_pod(testbed, namespace, memory_at_least(100), count=count)
    wait_for(testbed.core.list_namespaced_pod, scheduled, namespace=namespace, name=first, what="first pod scheduled")
    second = start_pod(testbed, namespace, memory_at_least(100), count=1)
    wait_for(testbed.core.list_namespaced_pod, unschedulable, namespace=namespace, name=second,
             what="second pod unschedulable while the first holds every big GPU")
    testbed.core.delete_namespaced_pod(first, namespace, grace_period_seconds=0)
    pod = wait_for(testbed.core.list_namespaced_pod, scheduled, namespace=namespace, name=second, timeout=90,
                   what="second pod scheduled once the first is gone")
    assert pod.spec.node_name == node
    claim = claim_of(testbed, namespace, second)
    assert claim.status.allocation.devices.results[0].pool == node
    record_proof("claim", f"{count} GPUs >= 100Gi, then 1 more once they are freed")
    record_proof("landed", f"second pod on {node} after the first was deleted")
