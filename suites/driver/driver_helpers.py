"""Claims, pods and allocation checks shared by the driver suite."""

from __future__ import annotations

import uuid

from fake_gpus.catalog import load_catalog
from fake_gpus.driver.identity import current_identity, parse_device_name
from fake_gpus.node import hardware_from_labels
from testbed.pytest.plugin import TestBed
from testbed.kube.waiting import wait_for

IDENTITY = current_identity()


def attr(name: str) -> str:
    return f"device.attributes['{IDENTITY.driver}'].{name}"


def start_pod(bed: TestBed, namespace: str, node: str, requests: list[tuple[str, str]]) -> str:
    """A pod pinned to `node` with one claim template of (device class, CEL selector) requests."""
    suffix = uuid.uuid4().hex[:6]
    reqs = [{"name": f"r{i}", "exactly": {"deviceClassName": cls, "selectors": [{"cel": {"expression": sel}}]}}
            for i, (cls, sel) in enumerate(requests)]
    bed.resource.create_namespaced_resource_claim_template(namespace, {
        "apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": f"tmpl-{suffix}"},
        "spec": {"spec": {"devices": {"requests": reqs}}}})
    bed.core.create_namespaced_pod(namespace, {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"pod-{suffix}"},
        "spec": {"nodeSelector": {"kubernetes.io/hostname": node},
                 "containers": [{"name": "main", "image": "registry.invalid/none:0", "resources": {"claims": [{"name": "gpu"}]}}],
                 "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": f"tmpl-{suffix}"}]}})
    return f"pod-{suffix}"


def mig_pod(bed: TestBed, namespace: str, node: str, *profiles: str) -> str:
    return start_pod(bed, namespace, node, [(IDENTITY.mig_class, f"{attr('profile')} == '{p}'") for p in profiles])


def gpu_pod(bed: TestBed, namespace: str, node: str, selector: str = "true") -> str:
    return start_pod(bed, namespace, node, [(IDENTITY.gpu_class, selector)])


def scheduled(pod) -> bool:
    return bool(pod.spec.node_name)


def unschedulable(pod) -> bool:
    return any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable"
               for c in (pod.status.conditions or []))


def settled(pod) -> bool:
    return scheduled(pod) or unschedulable(pod)


def wait_pod(bed: TestBed, namespace: str, name: str, predicate, what: str, timeout: float = 90):
    return wait_for(bed.core.list_namespaced_pod, predicate, namespace=namespace, name=name, timeout=timeout, what=f"pod {name}: {what}")


def allocated_devices(bed: TestBed, namespace: str) -> list[tuple[str, str]]:
    """(pool, device) of every allocation of our driver in `namespace`."""
    found = []
    for claim in bed.resource.list_namespaced_resource_claim(namespace).items:
        allocation = claim.status.allocation if claim.status else None
        for result in (allocation.devices.results if allocation else None) or []:
            if result.driver == IDENTITY.driver:
                found.append((result.pool, result.device))
    return found


def published_devices(bed: TestBed, pool: str) -> dict[str, object]:
    """Devices of the newest generation of `pool`, by name."""
    slices = [s for s in bed.resource.list_resource_slice().items if s.spec.pool.name == pool and s.spec.driver == IDENTITY.driver]
    newest = max(s.spec.pool.generation for s in slices)
    return {d.name: d for s in slices if s.spec.pool.generation == newest for d in (s.spec.devices or [])}


def overlapping_allocations(bed: TestBed, namespace: str) -> list[tuple[str, str, str]]:
    """Pairs of allocated devices sharing memory slices of one physical GPU: (pool, device, device).

    The placement is the device's true one: its start as the name spells it, its size the memory slices
    of that profile on the node's board (the hardware's truth, not what the driver declares); a full GPU
    covers all slices. A correct driver's counters make this empty."""
    catalog = load_catalog()
    spans: list[tuple[str, int, range, str]] = []
    for pool, device in allocated_devices(bed, namespace):
        assert device in published_devices(bed, pool), f"{device} allocated but not published in pool {pool}"
        hardware = hardware_from_labels(bed.core.read_node(pool).metadata.labels)
        assert hardware is not None, f"pool {pool} is not a node of this test bed"
        board = catalog[hardware.board]
        ref = parse_device_name(device)
        if ref.is_mig:
            span = range(ref.start, ref.start + board.profile_by_id(ref.profile_id).memory_slices)
        else:
            span = range(board.memory_slices)
        spans.append((pool, ref.minor, span, device))
    overlaps = []
    for i, (pool, minor, span, device) in enumerate(spans):
        for other_pool, other_minor, other_span, other in spans[i + 1:]:
            if (pool, minor) == (other_pool, other_minor) and set(span) & set(other_span):
                overlaps.append((pool, device, other))
    return overlaps
