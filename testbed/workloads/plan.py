"""A seed's generated workload drawn before it runs: the allocation machine's examples as recorded steps.

Drawn live, a workload is at the cluster's mercy: Hypothesis replays a failing example to confirm it, and
under kills the replay fails at another step or not at all, so it draws more or less than the first run
did (FlakyStrategyDefinition), and the verdict names Hypothesis instead of what failed. Here the state
machine runs against a recorder that takes each step as a runner would and keeps the same books (live
pods, shared claims), so the draws depend on the seed alone; whoever runs the steps afterwards
(testbed.campaign.run) runs each example once and judges what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable

from hypothesis import HealthCheck, Phase, seed as with_seed, settings
from hypothesis import strategies as st
from hypothesis.stateful import run_state_machine_as_test

from testbed.workloads.machine import workload_machine
from testbed.workloads.model import PodSpec, SharedClaim
from testbed.workloads.steps import AddShared, Arrive, Depart, Step
from testbed.workloads.strategies import churn_claim_specs, churn_pod_specs


@dataclass
class StepRecorder:
    """What the machine asks of a Runner, recorded instead of done: the books the machine's rules read
    (`pods` for the live-pod precondition) change exactly as a live runner's do."""

    pods: dict[str, PodSpec] = field(default_factory=dict)
    shared: dict[str, SharedClaim] = field(default_factory=dict)
    steps: list[Step] = field(default_factory=list)
    stats: dict[str, int] = field(default_factory=dict)

    def arrive(self, pod: PodSpec) -> bool:
        self.steps.append(Arrive(pod))
        self.pods[pod.name] = pod
        return True

    def add_shared(self, claim: SharedClaim) -> None:
        self.steps.append(AddShared(claim))
        self.shared[claim.name] = claim

    def depart(self, pod_name: str) -> None:
        self.steps.append(Depart(pod_name))
        self.pods.pop(pod_name)

    def close(self) -> None:
        """Nothing to clean up: nothing ran."""


def plan_examples(seed: int, examples: int, steps: int, boards: tuple[str, ...] = (), mig_percent: int = 50,
                  pod_strategy: Callable[..., st.SearchStrategy] = churn_pod_specs,
                  claim_strategy: Callable[..., st.SearchStrategy] = churn_claim_specs) -> list[list[Step]]:
    """The steps of every example Hypothesis generates for `seed` (up to `examples` of `steps` steps each)."""
    recorded: list[list[Step]] = []

    def recorder() -> StepRecorder:
        runner = StepRecorder()
        recorded.append(runner.steps)
        return runner

    machine = workload_machine(recorder, boards, mig_percent, pod_strategy=pod_strategy, claim_strategy=claim_strategy)
    # the public entry (get_state_machine_test is Hypothesis' internal helper); @seed on the machine is honoured
    run_state_machine_as_test(with_seed(seed)(machine), settings=settings(
        max_examples=examples, stateful_step_count=steps, phases=(Phase.generate,), database=None, deadline=None,
        suppress_health_check=list(HealthCheck), print_blob=False))
    return [example for example in recorded if example]
