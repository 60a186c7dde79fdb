"""Property bodies shared by the suites and by the fault-bite tests (which expect them to fail)."""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st

from fake_gpus.driver.identity import DriverIdentity, current_identity
from testbed.workloads.devices import Inventory
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.runner import Runner
from testbed.workloads.selectors import AnySelector, MemoryCompare
from testbed.workloads.strategies import COMPARISONS, partition_pods


def partitionable_nodes(api) -> dict[str, str]:
    """Nodes with shared counter sets (dynamic MIG), with the catalog board of their GPUs."""
    from kubernetes import client

    from testbed.workloads.truth import board_of

    inventory = Inventory.from_api(client.ResourceV1Api(api))
    nodes = {}
    for counter_set in inventory.counters:
        device = next((d for d in inventory.devices.values() if d.id.pool == counter_set.pool and board_of(d)), None)
        if device is not None and device.node:
            nodes[device.node] = board_of(device).key
    return nodes


@st.composite
def partition_churn_cases(draw, nodes: dict[str, str], max_pods: int = 5) -> tuple[str, list[PodSpec], list[int]]:
    """A node, pods asking it for partitions (arrival order), and the order they leave in."""
    node = draw(st.sampled_from(sorted(nodes)))
    count = draw(st.integers(1, max_pods))
    pods = [draw(partition_pods(f"p{i}", nodes[node], node), label=f"p{i}") for i in range(count)]
    order = draw(st.permutations(range(count)))
    return node, pods, list(order)


def partition_churn(api, layout_yaml: str, bundle: Path, case: tuple[str, list[PodSpec], list[int]], context: dict | None = None,
                    identity: DriverIdentity | None = None) -> dict:
    """Partitions arrive (sound, complete, first feasible alternative), all leave, and the GPU is whole
    again: counters back to zero and every GPU allocatable as a full GPU."""
    node, pods, order = case
    runner = Runner(api, layout_yaml, bundle_dir=bundle, context=dict(context or {}), identity=identity or current_identity()).open()
    try:
        for pod in pods:
            runner.arrive(pod)
        for index in order:
            runner.depart(pods[index].name)
        runner.check_released(node)
        return runner.stats
    finally:
        runner.close()


def memory_selector_cases(memories: list[int]) -> st.SearchStrategy:
    """A memory comparison near the given sizes (MiB), and how many GPUs to ask for."""
    near = st.sampled_from(memories).flatmap(lambda m: st.integers(m // 2, m * 2))
    return st.tuples(st.builds(MemoryCompare, st.sampled_from(COMPARISONS), st.sampled_from(memories) | near),
                     st.sampled_from((False, True)))


def memory_selector(api, layout_yaml: str, bundle: Path, case: tuple[AnySelector, bool], gpu_class: str,
                    context: dict | None = None, identity: DriverIdentity | None = None, node: str | None = None) -> dict:
    """One pod (on `node`, if given) whose claim selects whole GPUs by memory, or by another predicate (one
    of them, or All): the allocation must satisfy the selector on the published facts and on the board's real facts."""
    selector, all_devices = case
    runner = Runner(api, layout_yaml, bundle_dir=bundle, context=dict(context or {}), identity=identity or current_identity()).open()
    try:
        claim = ClaimSpec((Request("r0", (SubRequest("r0", gpu_class, (selector,), all_devices=all_devices),)),))
        runner.arrive(PodSpec("p0", (PodClaim("t0", template=claim),), node=node))
        runner.depart("p0")
        return runner.stats
    finally:
        runner.close()
