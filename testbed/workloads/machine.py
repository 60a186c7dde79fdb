"""The arrivals-and-departures state machine, parameterised by the cluster (and driver name) it runs on."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, precondition, rule

from fake_gpus.driver.identity import DriverIdentity, current_identity
from testbed.workloads.model import SharedClaim
from testbed.workloads.runner import Runner
from testbed.workloads.strategies import claim_specs, pod_specs

MAX_LIVE_PODS = 6


def allocation_machine(api, layout_yaml: str, bundle: Path, boards: tuple[str, ...] = (), mig_percent: int = 17,
                       context: dict | None = None, stats: dict[str, int] | None = None,
                       all_in_fallback: bool = True, identity: DriverIdentity | None = None,
                       pod_strategy: Callable[..., st.SearchStrategy] = pod_specs,
                       claim_strategy: Callable[..., st.SearchStrategy] = claim_specs,
                       runner_fields: dict | None = None,
                       capacity_strategy: Callable[..., st.SearchStrategy] | None = None) -> type[RuleBasedStateMachine]:
    """A state machine class whose every example runs in a namespace of its own on `api`'s cluster.

    `pod_strategy` and `claim_strategy` draw the arriving pods and the shared claims (default: the selector-probing
    `pod_specs` and `claim_specs`; the fault campaign's churn uses `churn_pod_specs`, `churn_claim_specs`).
    `runner_fields` go to each example's Runner (on real kubelets: the pods' image, grace, the node check).
    `capacity_strategy` (e.g. sharing_strategies.capacity_pod_specs), on a bed whose GPUs are shared, adds arrivals of
    pods asking capacity of a GPU, beside the others: several land on one GPU, departures give capacity back.

    Every rule is checked as it runs (the runner raises PropertyFailure): soundness after each step,
    completeness and fallback on arrival, liveness after each departure.
    """
    def live_runner() -> Runner:
        return Runner(api, layout_yaml, bundle_dir=bundle, context=dict(context or {}), identity=identity or current_identity(),
                      **(runner_fields or {})).open()

    return workload_machine(live_runner, boards, mig_percent, stats, all_in_fallback, pod_strategy, claim_strategy, capacity_strategy)


def workload_machine(make_runner: Callable[[], Runner], boards: tuple[str, ...] = (), mig_percent: int = 17,
                     stats: dict[str, int] | None = None, all_in_fallback: bool = True,
                     pod_strategy: Callable[..., st.SearchStrategy] = pod_specs,
                     claim_strategy: Callable[..., st.SearchStrategy] = claim_specs,
                     capacity_strategy: Callable[..., st.SearchStrategy] | None = None) -> type[RuleBasedStateMachine]:
    """The machine over whatever `make_runner()` returns per example: a live Runner, or a recorder of the steps
    (testbed.workloads.plan). Its draws depend only on earlier draws, never on what the runner observed."""

    class AllocationMachine(RuleBasedStateMachine):
        pods = Bundle("pods")
        shared = Bundle("shared")

        def __init__(self) -> None:
            super().__init__()
            self.runner = make_runner()
            self.made = 0

        def _name(self, prefix: str) -> str:
            self.made += 1
            return f"{prefix}{self.made}"

        @precondition(lambda self: len(self.runner.pods) < MAX_LIVE_PODS)
        @rule(target=pods, data=st.data())
        def arrive(self, data):
            name = self._name("p")
            self.runner.arrive(data.draw(pod_strategy(name, boards=boards, mig_percent=mig_percent, admin=True, all_in_fallback=all_in_fallback), label=name))
            return name

        @precondition(lambda self: len(self.runner.pods) < MAX_LIVE_PODS)
        @rule(target=pods, claim=shared, data=st.data())
        def arrive_sharing(self, claim, data):
            name = self._name("p")
            self.runner.arrive(data.draw(pod_strategy(name, shared=(claim,), boards=boards, mig_percent=mig_percent, admin=True, all_in_fallback=all_in_fallback), label=name))
            return name

        @rule(target=shared, data=st.data())
        def add_shared_claim(self, data):
            name = self._name("shared")
            self.runner.add_shared(SharedClaim(name, data.draw(claim_strategy(max_requests=1, boards=boards, mig_percent=mig_percent, admin=True, all_in_fallback=all_in_fallback), label=name)))
            return name

        @precondition(lambda self: capacity_strategy is not None and len(self.runner.pods) < MAX_LIVE_PODS)
        @rule(target=pods, data=st.data())
        def arrive_asking_capacity(self, data):
            # consumable capacity: the model tracks each shared GPU's capacity, so completeness after a departure
            # says the capacity given back is taken again, and soundness that no GPU holds more than it has
            name = self._name("p")
            self.runner.arrive(data.draw(capacity_strategy(name, boards=boards), label=name))
            return name

        @rule(pod=consumes(pods))
        def depart(self, pod):
            self.runner.depart(pod)

        def teardown(self) -> None:
            try:
                self.runner.close()
            finally:
                if stats is not None:
                    stats["examples"] = stats.get("examples", 0) + 1
                    for key, value in self.runner.stats.items():
                        stats[key] = stats.get(key, 0) + value

    return AllocationMachine
