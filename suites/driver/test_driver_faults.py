"""Each publisher fault switch makes a check fail that passes without it (the checks can bite)."""

from __future__ import annotations

import uuid

import pytest

from conftest import driver_cluster
from driver_helpers import IDENTITY, gpu_pod, mig_pod, overlapping_allocations, scheduled, settled, wait_pod
from fake_gpus.driver.faults import fault_env
from testbed.clusters.driver import DriverSpec
from testbed.kube.namespaces import create_namespace
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster


def overlaps_after_full_gpu_and_7g(bed: TestBed, ns: str, node: str) -> list:
    """A full-GPU claim and a 7g.80gb claim on a one-GPU dynamic node: allocations sharing memory slices."""
    pods = [gpu_pod(bed, ns, node), mig_pod(bed, ns, node, "7g.80gb")]
    for pod in pods:
        wait_pod(bed, ns, pod, settled, "scheduled or unschedulable")
    return overlapping_allocations(bed, ns)


def overlaps_after_2g_and_1g(bed: TestBed, ns: str, node: str) -> list:
    """One claim for a 2g.20gb and a 1g.10gb on a one-GPU dynamic node."""
    wait_pod(bed, ns, mig_pod(bed, ns, node, "2g.20gb", "1g.10gb"), scheduled, "scheduled")
    return overlapping_allocations(bed, ns)


def over_large_memory_claim_scheduled(bed: TestBed, ns: str, node: str) -> bool:
    """Whether a claim for a >= 100 GiB GPU lands on an 80 GB H100 node."""
    pod = gpu_pod(bed, ns, node, f"device.capacity['{IDENTITY.driver}'].memory.compareTo(quantity('100Gi')) >= 0")
    return scheduled(wait_pod(bed, ns, pod, settled, "scheduled or unschedulable"))


CASES = {
    "oversized-counters": (overlaps_after_full_gpu_and_7g, "dyn-check", "h100-80gb:1:dynamic-mig"),
    "short-placement": (overlaps_after_2g_and_1g, "dyn-check2", "h100-80gb:1:dynamic-mig"),
    "wrong-memory": (over_large_memory_claim_scheduled, "whole-h100", "h100-80gb:1:whole"),
}


@pytest.mark.parametrize("fault", sorted(CASES))
def test_check_passes_without_the_fault(bed_namespace, fault: str) -> None:
    bed, ns = bed_namespace
    check, node, _ = CASES[fault]
    assert not check(bed, ns, node)


@pytest.mark.parametrize("fault", sorted(CASES))
def test_check_fails_with_the_fault(bed, fault: str) -> None:
    check, _, node_spec = CASES[fault]
    with driver_cluster(bed, f"fault-{fault}", [f"n={node_spec}"], env=fault_env([fault])) as faulty:
        ns = f"t-{uuid.uuid4().hex[:10]}"
        create_namespace(faulty.core, ns)
        assert check(faulty, ns, "n"), f"{fault}: the check did not notice the fault"



def _published_memory(bed: TestBed) -> set:
    """The memory capacities the node's whole-GPU devices publish."""
    slices = bed.resource.list_resource_slice().items
    return {d.capacity["memory"].value for s in slices for d in (s.spec.devices or []) if "memory" in (d.capacity or {})}


def test_deploy_driver_replaces_the_driver_of_a_running_cluster(bed) -> None:
    """Cluster.deploy_driver on KWOK: the same nodes get a driver with a fault, then ours again."""
    with driver_cluster(bed, "redeploy", ["n=h100-80gb:1:whole"]) as running:
        cluster = running.cluster
        before = _published_memory(running)
        cluster.deploy_driver(DriverSpec(env=fault_env(["wrong-memory"])))
        assert cluster.saved_spec()["driver"]["env"] == fault_env(["wrong-memory"])
        assert _published_memory(running) != before
        cluster.deploy_driver(DriverSpec())
        assert cluster.saved_spec()["driver"]["env"] == {}
        assert _published_memory(running) == before
