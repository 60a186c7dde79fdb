"""The hardware-evolution state machine: live claims come and go while machines join, boards are replaced,
modes switch and the driver is updated (testbed.workloads.evolution), on a KWOK cluster of ours.

Every example has a namespace of its own; the fleet is the cluster's and carries over between examples
(teardown removes the nodes an example added, once nothing of it is left on them).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, initialize, invariant, multiple, precondition, rule

from fake_gpus.catalog import all_boards
from fake_gpus.node import parse_mode
from testbed.clusters.kwok.fleet import KwokFleet
from testbed.clusters.layout import NodeSpec
from testbed.kube.drain import drain
from testbed.workloads.bundle import layout_yaml
from testbed.workloads.evolution import Evolution
from testbed.workloads.model import PodSpec
from testbed.workloads.runner import Runner
from testbed.workloads.strategies import churn_pod_specs

# Every board a node can join in each of MODES: the catalog's MIG boards with NVIDIA's all-balanced layout (A100 to
# B300, GH200, RTX PRO 6000; the boards without MIG have no MIG mode), so a new board file joins the machine.
BOARDS = tuple(b.key for b in all_boards() if "all-balanced" in b.mig_layouts)
MODES = ("whole", "dynamic-mig", "static-mig:all-balanced")
MAX_LIVE_PODS, MAX_NODES = 4, 4


def evolution_machine(fleet: KwokFleet, api, bundle: Path, context: dict | None = None,
                      stats: dict[str, int] | None = None, runner_fields: dict | None = None) -> type[RuleBasedStateMachine]:
    """A state machine class over `fleet`'s cluster (its API client `api`); `runner_fields` reach each example's
    Runner (a node_check: testbed.workloads.physical_watch judges every node's NVML after every step)."""

    class EvolutionMachine(RuleBasedStateMachine):
        pods = Bundle("pods")

        def __init__(self) -> None:
            super().__init__()
            self.start = {n.name for n in fleet.layout().nodes}
            # the fleet as this example finds it: what its bundle's replay brings up
            runner = Runner(api, layout_yaml(fleet.layout()), bundle_dir=bundle, context=dict(context or {}),
                            **(runner_fields or {})).open()
            self.evo = Evolution(runner, fleet)
            self.made = 0

        def nodes(self) -> list[str]:
            return sorted(n.name for n in fleet.layout().nodes)

        def _name(self, prefix: str) -> str:
            self.made += 1
            return f"{prefix}{self.made}"

        def place(self, pod: PodSpec) -> str:
            self.evo.runner.arrive(pod)
            return pod.name

        @initialize(target=pods, data=st.data(), count=st.integers(1, 2))
        def live_claims(self, data, count):
            """The fleet evolves under live claims: an example starts with some."""
            names = [self._name("p") for _ in range(count)]
            return multiple(*(self.place(data.draw(churn_pod_specs(n, boards=BOARDS, mig_percent=50), label=n)) for n in names))

        @precondition(lambda self: len(self.evo.runner.pods) < MAX_LIVE_PODS)
        @rule(target=pods, data=st.data())
        def arrive(self, data):
            name = self._name("p")
            return self.place(data.draw(churn_pod_specs(name, boards=BOARDS, mig_percent=50), label=name))

        @rule(pod=consumes(pods))
        def depart(self, pod):
            if pod in self.evo.runner.pods:  # a drain may have evicted it already
                self.evo.runner.depart(pod)

        @precondition(lambda self: len(fleet.layout().nodes) < MAX_NODES)
        @rule(board=st.sampled_from(BOARDS), count=st.integers(1, 2), mode=st.sampled_from(MODES))
        def add_node(self, board, count, mode):
            self.evo.add_node(NodeSpec(self._name(f"join-{board.split('-')[0]}-"), board, count, parse_mode(mode)))

        @rule(data=st.data(), board=st.sampled_from(BOARDS), count=st.integers(1, 2), mode=st.sampled_from(MODES))
        def replace_node(self, data, board, count, mode):
            node = data.draw(st.sampled_from(self.nodes()), label="node")
            self.evo.replace_node(NodeSpec(node, board, count, parse_mode(mode)))

        @rule(data=st.data(), mode=st.sampled_from(MODES))
        def switch_mode(self, data, mode):
            node = data.draw(st.sampled_from(self.nodes()), label="node")
            self.evo.switch_mode(node, parse_mode(mode))

        @precondition(lambda self: bool(self.evo.runner.pods))
        @rule()
        def roll_driver(self):
            """Only with claims allocated (and prepared: the roll waits for that), the case that matters."""
            self.evo.roll_driver()

        @invariant()
        def fleet_is_as_published(self):
            self.evo.check()

        def teardown(self) -> None:
            runner = self.evo.runner
            try:
                runner.close()
                for node in sorted(set(self.nodes()) - self.start):  # leave the fleet as big as it came
                    drain(runner.core, node)
                    fleet.remove(node)
            finally:
                if stats is not None:
                    stats["examples"] = stats.get("examples", 0) + 1
                    for step in runner.steps:
                        stats[step.op] = stats.get(step.op, 0) + 1

    return EvolutionMachine
