"""One KWOK bed shared by hardware-evolution tests, one test at a time, put back as it came up in between.

A test changes the fleet (machines join, boards are replaced, modes switch), may leave a node cordoned or a
MIG instance leaked, and may switch a driver fault on by a driver update. Bringing up a cluster per test
cost minutes each; `reset` undoes all of that in seconds and then checks that it did, so that no test sees
what another left and the order they run in does not matter.
"""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.clusters.driver import DriverSpec
from testbed.clusters.kwok.fleet import KwokFleet
from testbed.clusters.layout import Layout, NodeSpec
from testbed.kube.drain import cordon, drain
from testbed.kube.waiting import WaitTimeout, until, wait_for_all
from testbed.workloads.bundle import layout_yaml
from testbed.workloads.evolution import Evolution
from testbed.workloads.runner import NAMESPACE_LABEL, PropertyFailure, Runner

RESET_TIMEOUT = 120.0  # seconds for each wait of a reset: namespaces gone, a node drained, slices gone
LEAK_GRACE = 20.0  # seconds the last claims' MIG instances get to go before they count as leaked


class ResetError(RuntimeError):
    """The bed did not come back to the layout and driver it was brought up with."""


@dataclass
class SharedFleet:
    """A bed's fleet as brought up (`layout`, `driver`), handed to one test after another by `take`."""

    fleet: KwokFleet
    api: client.ApiClient
    layout: Layout
    driver: DriverSpec
    taken: bool = False

    def take(self) -> KwokFleet:
        """The fleet for the next test, reset first when a test had it before."""
        if self.taken:
            reset(self.fleet, self.api, self.layout, self.driver)
        self.taken = True
        return self.fleet


def _leaking(fleet: KwokFleet) -> set[str]:
    """Partitionable nodes holding MIG instances."""
    return {n.name for n in fleet.layout().nodes if n.mode.kind == "dynamic-mig" and fleet.mig_instances(n.name)}


def _stale(fleet: KwokFleet, wanted: dict[str, NodeSpec]) -> list[str]:
    """Nodes to remove: not of the layout, of other boards or mode than the layout's, or a partitionable
    node whose MIG instances outlived every claim (a leak: only a new machine is free of it). The kubelet
    unprepares a deleted pod's claims after the pod is gone, so instances get LEAK_GRACE seconds to go
    first; a node recreated under an unprepare still running would leave it failing against the new one."""
    try:
        until("MIG instances of deleted claims gone", lambda: not _leaking(fleet), timeout=LEAK_GRACE, interval=0.5)
    except WaitTimeout:
        pass
    leaking = _leaking(fleet)
    return [n.name for n in fleet.layout().nodes if wanted.get(n.name) != n or n.name in leaking]


def reset(fleet: KwokFleet, api: client.ApiClient, layout: Layout, driver: DriverSpec, timeout: float = RESET_TIMEOUT) -> None:
    """Back to `layout` run by `driver`: every runner namespace gone (their claims unprepared), the driver
    rolled to `driver` (faults off again), stale nodes drained and removed with whatever they published,
    the layout's missing nodes added, all of them schedulable; ResetError unless the fleet's checks hold then."""
    core, resource = client.CoreV1Api(api), client.ResourceV1Api(api)
    selector = f"{NAMESPACE_LABEL}=true"
    for ns in core.list_namespace(label_selector=selector).items:
        try:
            core.delete_namespace(ns.metadata.name, body=client.V1DeleteOptions(grace_period_seconds=0))
        except ApiException as exc:
            if exc.status != 404:
                raise
    wait_for_all(core.list_namespace, lambda left: not left, label_selector=selector, timeout=timeout, what="runner namespaces gone")
    fleet.roll_to(driver)  # first: what follows must meet a correct driver, not the last test's faulty one
    wanted = {n.name: n for n in layout.nodes}
    for name in _stale(fleet, wanted):
        drain(core, name, timeout)
        fleet.remove(name)

    def orphans() -> list[str]:
        present = {n.name for n in fleet.layout().nodes}
        return [s.metadata.name for s in resource.list_resource_slice(field_selector=f"spec.driver={driver.name}").items
                if s.spec.node_name and s.spec.node_name not in present]

    for name in orphans():  # slices a fault kept from their node, or the garbage collector has yet to take
        try:
            resource.delete_resource_slice(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    until("slices of removed nodes gone", lambda: not orphans(), timeout=timeout)
    present = {n.name for n in fleet.layout().nodes}
    for node in layout.nodes:
        if node.name in present:
            cordon(core, node.name, False)  # a drain of the last test may have left it cordoned
        else:
            fleet.add(node)
    if set(fleet.layout().nodes) != set(layout.nodes):
        raise ResetError(f"the fleet is {fleet.layout().nodes}, not {layout.nodes}")
    try:
        Evolution(Runner(api, layout_yaml(layout), bound=timeout), fleet).facts()
    except PropertyFailure as failure:
        raise ResetError(f"the bed came back to its layout but its slices do not show it: {failure}") from failure
