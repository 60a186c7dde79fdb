"""Kubernetes 1.37 features on KWOK beds of our driver: gang scheduling of multi-node GPU jobs (PodGroup,
scheduling.k8s.io/v1beta1) and device compatibility groups on dynamic MIG (DRADeviceCompatibilityGroups).

Beds of 1.37 (and one of 1.36) whatever --k8s says, built from source on first use: `nox -s features137`
($DRA_TESTBED_FEATURES_137=full). docs/design/k8s-1.37-features.md says what each test shows.
"""

from __future__ import annotations

import os
import uuid

import pytest
from kubernetes.client.exceptions import ApiException

from conftest import driver_cluster
from driver_helpers import (IDENTITY, allocated_devices, attr, gpu_pod, mig_pod, overlapping_allocations, published_devices,
                            scheduled, settled, unschedulable, wait_pod)
from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.slices import COMPATIBILITY_GROUPS_ENV, LIST_ATTRIBUTES_ENV
from testbed.clusters.driver import DriverSpec
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import wait_for_all
from testbed.kube.podgroups import create_podgroup, gang_podgroup, podgroups_served
from testbed.pytest.plugin import TestBed
from testbed.workloads.gang import GangJob, submit, wait_outcome

pytestmark = pytest.mark.cluster
FULL_ENV = "DRA_TESTBED_FEATURES_137"  # "full": these beds (nox -s features137)

WHOLE_NODES = ("gw-0", "gw-1", "gw-2")  # one whole H100 each: 3 GPUs
# one dynamic-MIG H100 each: a 3g.40gb or 4g.40gb (4 of the 8 memory slices each) fits twice per GPU, 4 in
# all; a driver whose counters let memory slices be taken twice fits a 4g.40gb over a 3g.40gb, 6 in all
MIG_NODES = ("gm-0", "gm-1")
GANG_NODES = [f"{n}=h100-80gb:1:whole" for n in WHOLE_NODES] + [f"{n}=h100-80gb:1:dynamic-mig" for n in MIG_NODES]
MIG_SELECTOR = f"{attr('profile')} in ['3g.40gb', '4g.40gb']"
# long enough for the scheduler to bind a gang that fits (seconds on an idle bed); a gang that does not fit
# waits at Permit, so its outcome is read after this
SETTLE_SECONDS = 45.0


@pytest.fixture(scope="module", autouse=True)
def _full_only() -> None:  # module scope: decided before the module's bed would come up
    if os.environ.get(FULL_ENV) != "full":
        pytest.skip(f"1.37 feature beds run in `nox -s features137` (${FULL_ENV}=full)")  # allowed in suites/skips.yaml


@pytest.fixture(scope="module")
def gang_bed(bed, _full_only):
    with driver_cluster(bed, "gang", GANG_NODES, minor="1.37") as testbed:
        yield testbed


def _namespace(bed: TestBed) -> str:
    ns = f"gang-{uuid.uuid4().hex[:8]}"
    create_namespace(bed.core, ns)
    return ns


def _drop(bed: TestBed, ns: str) -> None:
    """Delete `ns` and wait until it is gone, so its claims no longer hold devices the next test needs."""
    bed.core.delete_namespace(ns)
    wait_for_all(bed.core.list_namespace, lambda names: ns not in names, what=f"namespace {ns} gone", timeout=120)


def _job(size: int, mig: bool) -> GangJob:
    if mig:
        return GangJob(f"mig-{size}", size, IDENTITY.mig_class, MIG_SELECTOR, MIG_NODES)
    return GangJob(f"whole-{size}", size, IDENTITY.gpu_class, "true", WHOLE_NODES)


@pytest.mark.parametrize("mig", [False, True], ids=["whole", "mig"])
def test_gang_one_device_short_binds_nothing_and_allocates_nothing(gang_bed: TestBed, mig: bool) -> None:
    capacity = 4 if mig else len(WHOLE_NODES)
    job = _job(capacity + 1, mig)
    ns = _namespace(gang_bed)
    submit(gang_bed.api, ns, job)
    outcome = wait_outcome(gang_bed.api, ns, job, SETTLE_SECONDS)
    assert not outcome.bound, f"a gang one device short bound {outcome.bound}"
    assert not outcome.allocated_claims, f"a gang that did not schedule left claims allocated: {sorted(outcome.allocated_claims)}"
    _drop(gang_bed, ns)


@pytest.mark.parametrize("mig", [False, True], ids=["whole", "mig"])
def test_gang_that_fits_binds_every_pod_over_several_nodes(gang_bed: TestBed, mig: bool) -> None:
    capacity = 4 if mig else len(WHOLE_NODES)
    job = _job(capacity, mig)
    ns = _namespace(gang_bed)
    submit(gang_bed.api, ns, job)
    outcome = wait_outcome(gang_bed.api, ns, job, SETTLE_SECONDS)
    assert outcome.all_bound, f"only {sorted(outcome.bound)} of {job.size} bound"
    assert set(outcome.bound.values()) == set(job.nodes), f"the gang did not spread over {job.nodes}: {outcome.bound}"
    assert len(outcome.allocated_claims) == job.size
    _drop(gang_bed, ns)


def test_podgroup_claim_is_one_device_shared_by_the_whole_gang(gang_bed: TestBed) -> None:
    """DRAWorkloadResourceClaims (beta, off by default in 1.37): a claim of the PodGroup is generated once and
    all pods share its one device, so the gang lands on that device's node."""
    job = GangJob("shared-2", 2, IDENTITY.gpu_class, "true", WHOLE_NODES, group_claim=True)
    ns = _namespace(gang_bed)
    submit(gang_bed.api, ns, job)
    outcome = wait_outcome(gang_bed.api, ns, job, SETTLE_SECONDS)
    assert outcome.all_bound, f"only {sorted(outcome.bound)} of {job.size} bound: {outcome.unschedulable}"
    assert len(set(outcome.bound.values())) == 1, f"pods sharing one device on several nodes: {outcome.bound}"
    assert len(outcome.allocated_claims) == 1 and len(allocated_devices(gang_bed, ns)) == 1
    _drop(gang_bed, ns)


def test_gang_short_of_real_mig_capacity_binds_under_oversized_counters(bed) -> None:
    """The all-or-none verdict rests on our counters: a driver declaring twice the memory slices lets the
    gang one real device short bind, placing MIG devices on memory the GPU does not have."""
    nodes = [f"{n}=h100-80gb:1:dynamic-mig" for n in MIG_NODES]
    with driver_cluster(bed, "gang-fault", nodes, env=fault_env(["oversized-counters"]), minor="1.37") as faulty:
        job = _job(5, mig=True)
        ns = _namespace(faulty)
        submit(faulty.api, ns, job)
        outcome = wait_outcome(faulty.api, ns, job, SETTLE_SECONDS)
        assert outcome.all_bound, f"oversized-counters: the gang check did not notice the fault ({outcome})"


def test_podgroups_are_not_served_by_1_36(bed) -> None:
    """1.36 has no scheduling.k8s.io/v1beta1 PodGroup (only the alpha v1alpha2): the server refuses it."""
    with driver_cluster(bed, "gang-136", ["n=h100-80gb:1:whole"], minor="1.36") as old:
        assert not podgroups_served(old.api)
        ns = _namespace(old)
        with pytest.raises(ApiException) as refused:
            create_podgroup(old.api, ns, gang_podgroup("g", 2))
        assert refused.value.status == 404, refused.value


def test_podgroups_are_served_by_1_37(gang_bed: TestBed) -> None:
    assert podgroups_served(gang_bed.api)


def _whole_and_7g(bed: TestBed, node: str) -> tuple[list, int]:
    """A whole-GPU claim and a 7g.80gb claim on a one-GPU dynamic node: the allocations sharing memory
    slices, and how many devices were allocated; the namespace is gone (claims released) on return."""
    ns = _namespace(bed)
    for pod in (gpu_pod(bed, ns, node), mig_pod(bed, ns, node, "7g.80gb")):
        wait_pod(bed, ns, pod, settled, "scheduled or unschedulable")
    overlaps, allocated = overlapping_allocations(bed, ns), len(allocated_devices(bed, ns))
    _drop(bed, ns)
    return overlaps, allocated


def test_compatibility_groups_keep_whole_and_mig_apart_without_counters(bed) -> None:
    """Under counters-undeclared the full GPU takes no memory slices, so only the compatibility groups keep
    a whole-GPU claim and a MIG claim off one GPU: without groups they land together, with groups never."""
    with driver_cluster(bed, "compat", ["cg=h100-80gb:1:dynamic-mig"], env=fault_env(["counters-undeclared"]),
                        minor="1.37") as faulty:
        overlaps, allocated = _whole_and_7g(faulty, "cg")
        assert overlaps and allocated == 2, "counters-undeclared without groups: no overlap to prevent"
        faulty.cluster.deploy_driver(DriverSpec(env={**fault_env(["counters-undeclared"]), COMPATIBILITY_GROUPS_ENV: "1"}))
        overlaps, allocated = _whole_and_7g(faulty, "cg")
        assert not overlaps, f"compatibility groups did not keep the whole GPU and a MIG device apart: {overlaps}"
        assert allocated == 1, "the whole-GPU claim should still be allocated (the first pod), the MIG claim refused"


def test_list_type_numa_node_selects_with_includes(bed) -> None:
    """With list-type attributes on (our switch; NVIDIA's gate of the same name), numaNode is a list and a
    CEL `includes()` picks a GPU by it: the node's own NUMA node matches, another does not."""
    nodes = ["la=h100-80gb:1:whole"]
    with driver_cluster(bed, "listattr", nodes, env={LIST_ATTRIBUTES_ENV: "1"}, minor="1.37") as listed:
        numa = published_devices(listed, "la")["gpu-0"].attributes["resource.kubernetes.io/numaNode"]
        assert numa.ints and numa.int is None, f"numaNode not published as a list: {numa}"
        ns = _namespace(listed)
        here = gpu_pod(listed, ns, "la", f"device.attributes['resource.kubernetes.io'].numaNode.includes({numa.ints[0]})")
        elsewhere = gpu_pod(listed, ns, "la",
                            f"device.attributes['resource.kubernetes.io'].numaNode.includes({numa.ints[0] + 1})")
        assert scheduled(wait_pod(listed, ns, here, settled, "scheduled or unschedulable"))
        assert unschedulable(wait_pod(listed, ns, elsewhere, settled, "scheduled or unschedulable"))
