"""Hardware evolution of a running KWOK cluster: machines join and leave, a node's MIG mode changes.

What happens to a real fleet, done through the real API where one exists: a machine that joins is a
Node its kubelet registers (here: created), one that is gone is a Node deleted, a mode switch is an
admin's change of the node's hardware labels that the machine's MIG manager acts on (here: the KWOK
publisher process, which plays the machines). The driver follows each change as a DaemonSet follows its
nodes (KwokDriver.join / leave), and the cluster's recorded layout follows too, so a later driver
redeploy serves the fleet as it is now. Draining a node first is the caller's part (testbed.kube.drain).
"""

from __future__ import annotations

from dataclasses import replace

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.machine.provision import ProvisionError, node_labels
from fake_gpus.node import Mode
from fake_gpus.nvml.state import StateError, validate_state_dir
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec
from testbed.clusters.kwok.cluster import KwokCluster
from testbed.clusters.kwok.driver import KwokDriver, kwok_driver
from testbed.clusters.kwok.nodes import node_object
from testbed.clusters.layout import Layout, NodeSpec


class KwokFleet:
    """The GPU nodes of one running KWOK cluster, changed one at a time."""

    def __init__(self, cluster: KwokCluster, api: client.ApiClient) -> None:
        self.cluster = cluster
        self.core = client.CoreV1Api(api)

    def layout(self) -> Layout:
        """The fleet as it is now."""
        return self.cluster.saved_layout()

    def driver_spec(self) -> DriverSpec:
        return DriverSpec.from_dict((self.cluster.saved_spec() or {}).get("driver") or {})

    def _driver(self) -> KwokDriver:
        return kwok_driver(self.driver_spec())

    def _record(self, nodes: list[NodeSpec]) -> None:
        self.cluster.record_layout(Layout(tuple(nodes), name=self.cluster.name))

    def add(self, node: NodeSpec) -> None:
        """A machine with `node`'s boards joins: its Node registers, the driver serves it."""
        try:
            node_labels(node.hardware)  # checked before anything changes
        except ProvisionError as exc:
            raise ClusterError(f"node {node.name}: {exc}") from exc
        nodes = list(self.layout().nodes)
        if any(n.name == node.name for n in nodes):
            raise ClusterError(f"node {node.name} is already in the fleet; valid: a new name, or replace it after it left")
        self._driver().join(self.cluster.home, self.cluster.kubeconfig(), node)
        self.core.create_node(body=node_object(node))
        self._record(nodes + [node])

    def remove(self, name: str) -> NodeSpec:
        """The machine `name` is gone: its Node deleted, the driver stops serving it. Returns what it was."""
        nodes = list(self.layout().nodes)
        gone = next((n for n in nodes if n.name == name), None)
        if gone is None:
            raise ClusterError(f"no node {name} in the fleet; valid: {', '.join(n.name for n in nodes) or 'none'}")
        try:
            self.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        self._driver().leave(self.cluster.home, name)
        self._record([n for n in nodes if n.name != name])
        return gone

    def switch_mode(self, name: str, mode: Mode) -> NodeSpec:
        """The admin switches node `name` to `mode`: its hardware labels change (the machine reconfigures
        its GPUs from them) and its plugin starts anew in that mode. Returns the node as it is now."""
        nodes = list(self.layout().nodes)
        old = next((n for n in nodes if n.name == name), None)
        if old is None:
            raise ClusterError(f"no node {name} in the fleet; valid: {', '.join(n.name for n in nodes) or 'none'}")
        new = replace(old, mode=mode)
        try:
            wanted = node_labels(new.hardware)
        except ProvisionError as exc:
            raise ClusterError(f"node {name}: {exc}") from exc
        labels = {key: None for key in node_labels(old.hardware) if key not in wanted}  # None: the label goes
        labels.update(wanted)
        self.core.patch_node(name, {"metadata": {"labels": labels}})
        self._driver().join(self.cluster.home, self.cluster.kubeconfig(), new)
        self._record([new if n.name == name else n for n in nodes])
        return new

    def mig_instances(self, node: str) -> set[tuple[int, int, int]]:
        """The MIG instances the node's NVML holds now, as (GPU minor, GPU-instance profile id, start): the
        machine's own state, which the KWOK publisher process keeps for every node."""
        try:
            gpus, mig = validate_state_dir(self.cluster.home / "nvml" / node)
        except (OSError, StateError):
            return set()  # no machine (gone, or not made yet): nothing on it
        minor = {g.index: g.minor for g in gpus}
        return {(minor[g.gpu], g.profile_id, g.start) for g in mig.gpu_instances}

    def roll_driver(self, env: dict[str, str]) -> None:
        """A driver update: the publisher and every node's plugin replaced by ones with `env` added (a new
        generation), the kubelets left running, on the same nodes and hardware; returns once it has
        published again (the plugins restart meanwhile)."""
        self.roll_to(self.driver_spec().with_env(env))

    def roll_to(self, spec: DriverSpec) -> None:
        """A driver update to exactly `spec` (its env replaces the running one's, so a fault switched on by an
        earlier roll goes): rolled as `roll_driver` rolls."""
        kwok_driver(spec).roll(self.cluster.home, self.cluster.kubeconfig(), self.layout())
        self.cluster.record_driver(spec)
