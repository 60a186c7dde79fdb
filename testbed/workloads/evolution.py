"""Hardware evolution with live claims, as steps a runner records and checks: machines join, boards are
replaced, a node's mode switches, the driver is updated.

Each step is what an operator does on a real fleet, through the real API: a node whose hardware changes
is drained first (cordon, evict; testbed.kube.drain), then changed (testbed.clusters.kwok.fleet), then opened
again. After every step the published slices are checked against the fleet as it really is now
(fleet_facts: each node's boards and mode, nothing left of a node that went, no claim on a device no
slice publishes, no MIG instance no claim holds) and the runner's own checks run (soundness, and pods the
model says fit get scheduled within the bound). A driver update with claims allocated and prepared must
leave slices and allocations as they were, and a new pod must schedule and be prepared afterwards.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Iterable

from kubernetes import client

from fake_gpus.node import Mode, NodeHardware, parse_mode
from testbed.clusters.kwok.fleet import KwokFleet
from testbed.clusters.layout import NodeSpec
from testbed.kube.drain import cordon, drain
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kube.slice_diff import fingerprint, restart_changes
from testbed.workloads.fleet_facts import fleet_facts, leaked, stranded
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.observe import Snapshot
from testbed.workloads.oracle import Violation
from testbed.workloads.runner import Runner
from testbed.workloads.steps import EVOLUTION, AddNode, ReplaceNode, RollDriver, Step, SwitchMode

GENERATION_ENV = "DRA_TESTBED_DRIVER_GENERATION"  # names the driver generation a roll brings (read by nobody)
POLL = 0.5


@dataclass
class Evolution:
    """The fleet of `runner`'s cluster, changed one step at a time and checked after each."""

    runner: Runner
    fleet: KwokFleet
    generation: int = 0

    @property
    def core(self) -> client.CoreV1Api:
        return self.runner.core

    def hardware(self) -> dict[str, NodeHardware]:
        """Each node's hardware now, as its machine really is."""
        return {n.name: n.hardware for n in self.fleet.layout().nodes}

    # --- checks -------------------------------------------------------------------------------------

    def problems(self) -> tuple[list[Violation], Snapshot]:
        snap = self.runner.snapshot()
        driver = self.runner.identity.driver
        fleet = self.hardware()
        found = fleet_facts(snap.inventory, fleet, driver)
        found += stranded(snap.inventory, [(c.owner, c.node, c.results) for c in snap.allocated()])
        for node, hardware in fleet.items():
            if hardware.mode.kind == "dynamic-mig":
                held = [r.device for c in snap.allocated() if c.node == node for r in c.results]
                found += leaked(node, self.fleet.mig_instances(node), held)
        return found, snap

    def check(self) -> None:
        """The fleet's checks, every bound pod's claims prepared by its node's plugin (joined and switched
        nodes included), then the runner's: soundness, and pending pods that fit get scheduled."""
        self.facts()
        self._await_prepared(self._bound_pods())
        self.runner.settle()

    def facts(self) -> None:
        """The fleet's checks hold within the bound (a publish or an unprepare may still be under way)."""
        deadline = time.monotonic() + self.runner.bound
        while True:
            found, snap = self.problems()
            if not found or time.monotonic() > deadline:
                break
            time.sleep(POLL)
        self.runner.fail_if(found, snap)

    # --- steps --------------------------------------------------------------------------------------

    def _drain(self, node: str) -> None:
        """Cordon and drain `node` through the Eviction API; its pods of ours are gone, their claims released."""
        ours = [name for name, view in self.runner.world().pods.items() if view.node == node and name in self.runner.pods]
        claims = {name: self.runner.pod_claims(name) for name in ours}
        drain(self.core, node, timeout=max(self.runner.bound, 60))
        for name in ours:
            self.runner.released(name, claims[name])

    def add_node(self, node: NodeSpec) -> None:
        """A machine joins: its slices must describe it, and pods waiting for such hardware get it."""
        self.runner.steps.append(AddNode(node.name, node.board, node.count, str(node.mode)))
        self.fleet.add(node)
        self.check()

    def replace_node(self, node: NodeSpec) -> None:
        """Node `node.name` is drained and leaves (its slices must go), then comes back with `node`'s boards."""
        self.runner.steps.append(ReplaceNode(node.name, node.board, node.count, str(node.mode)))
        self._drain(node.name)
        self.fleet.remove(node.name)
        self.check()  # the machine is gone: so must its slices be
        self.fleet.add(node)
        self.check()

    def switch_mode(self, name: str, mode: Mode) -> None:
        """Node `name` is drained, switched to `mode`, and takes pods again: its slices are those of the new mode."""
        self.runner.steps.append(SwitchMode(name, str(mode)))
        self._drain(name)
        self.fleet.switch_mode(name, mode)
        self.facts()  # republished in its new mode before it takes pods again (the model knows no cordon)
        cordon(self.core, name, False)
        self.check()

    def roll_driver(self) -> None:
        """The driver is updated while claims are allocated and prepared: slices and allocations stay as they
        were, nothing leaks, and a new pod schedules and is prepared by the new generation."""
        self.generation += 1
        self.runner.steps.append(RollDriver(self.generation))
        self._await_prepared(self._bound_pods())
        slices_before = self._slices()
        claims_before = self._allocations()
        self.fleet.roll_driver({GENERATION_ENV: str(self.generation)})
        problems = []
        churn, _ = restart_changes(slices_before, self._slices())
        if churn:
            problems.append(Violation("evolution", f"a driver update with no hardware change churned its slices: {'; '.join(churn[:4])}",
                                      "the same slices at the same generations", churn))
        claims_after = self._allocations()
        if claims_after != claims_before:
            problems.append(Violation("evolution", "allocations changed across a driver update", claims_before, claims_after))
        self.runner.fail_if(problems)
        self.check()
        self._probe()

    def _bound_pods(self) -> list[str]:
        return [name for name, view in self.runner.world().pods.items() if view.node and name in self.runner.pods and view.claims]

    def _await_prepared(self, pods: Iterable[str]) -> None:
        """Until the node's kubelet has prepared every claim of `pods` (its mark on each pod)."""
        waiting = set(pods)
        deadline = time.monotonic() + self.runner.bound
        while waiting and time.monotonic() < deadline:
            marked = {p.metadata.name for p in self.core.list_namespaced_pod(self.runner.namespace).items
                      if (p.metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true"}
            waiting -= marked
            if waiting:
                time.sleep(POLL)
        if waiting:
            self.runner.fail_if([Violation("evolution", f"claims of pods {sorted(waiting)} not prepared within {self.runner.bound:.0f}s",
                                           "prepared", sorted(waiting))])

    def _probe(self) -> None:
        """A new pod of one whole GPU (else one MIG device) where the model says one fits: it must schedule
        and be prepared by the updated driver. Not a step of its own (a replay re-runs it with the roll)."""
        identity = self.runner.identity
        mark = len(self.runner.steps)
        for cls in (identity.gpu_class, identity.mig_class):
            pod = PodSpec(f"probe-{self.generation}", (PodClaim("t0", template=ClaimSpec((Request("r0", (SubRequest("r0", cls),)),))),))
            if self.runner.expected_nodes(pod, self.runner.snapshot()):
                self.runner.arrive(pod)  # completeness: it fits, so it must schedule within the bound
                self._await_prepared([pod.name])
                self.runner.depart(pod.name)
                break
        del self.runner.steps[mark:]

    def _slices(self) -> dict[str, dict]:
        serialize = self.runner.api.sanitize_for_serialization
        return fingerprint([serialize(s) for s in self.runner.resource.list_resource_slice().items
                            if s.spec.driver == self.runner.identity.driver])

    def _allocations(self) -> dict[str, list[str]]:
        return {c.owner: sorted(str(r.device) for r in c.results) for c in self.runner.snapshot().allocated()}

    # --- replay -------------------------------------------------------------------------------------

    def run_steps(self, steps: Iterable[Step]) -> None:
        """Re-run recorded steps (a bundle's), evolution steps included."""
        for step in steps:
            if isinstance(step, AddNode):
                self.add_node(NodeSpec(step.node, step.board, step.count, parse_mode(step.mode)))
            elif isinstance(step, ReplaceNode):
                self.replace_node(NodeSpec(step.node, step.board, step.count, parse_mode(step.mode)))
            elif isinstance(step, SwitchMode):
                self.switch_mode(step.node, parse_mode(step.mode))
            elif isinstance(step, RollDriver):
                self.roll_driver()
            else:
                assert not isinstance(step, EVOLUTION)
                self.runner.run_steps([step])
