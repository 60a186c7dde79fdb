"""The fault campaign's smoke: a dozen random kills of the plugin, publisher, scheduler, apiserver and etcd
during generated workloads on KWOK, against the same seeds with zero kills; then the campaign must
report more than zero with each fault it exists to catch. On the smoke's cluster: a seed's verdict is
what failed (never Hypothesis replaying it under other circumstances), and a killed component's downtime
is excused from the scheduling bound while a scheduler that stalls on its own still fails it.

The long run (100 kills) is `nox -s campaign` (benchmarks/fault_campaign.py).
"""

from __future__ import annotations

import os
import signal
import time

import pytest

from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.identity import current_identity
from testbed.campaign.chaos import COMPONENTS
from testbed.campaign.report import CAUGHT_AS, judge, table
from testbed.campaign.session import CAMPAIGN_LAYOUT, kwok_session
from testbed.kube.waiting import WaitTimeout
from testbed.workloads import runner as runner_module
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.runner import PropertyFailure, Runner
from testbed.workloads.steps import Arrive

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SMOKE_KILLS = 12
INTERVAL = (1.0, 3.0)  # seconds between kills; each kill also waits until every unit serves again


@pytest.fixture(scope="module")
def clean(bed):
    """The smoke's KWOK cluster (our driver, no fault) with every unit supervised."""
    with bed(CAMPAIGN_LAYOUT, env=fault_env([]), label="campaign", backend="kwok", attempts=2) as testbed:
        with kwok_session(testbed.cluster, CAMPAIGN_LAYOUT, [], label="campaign", examples=3, steps=6) as session:
            yield session


def _runs(session, kills: int, max_seeds: int) -> dict:
    chaos = session.run(kills, max_seeds=max_seeds, interval=INTERVAL)
    calm = session.run(0, seeds=[s.seed for s in chaos.seeds])
    runs = {"kills": chaos, "zero kills": calm}
    print(table(runs))
    return runs


def test_a_dozen_kills_lose_leak_and_double_allocate_nothing(clean) -> None:
    # max_seeds bounds the run, the kills end it: on a quiet machine 8 seeds took 38 s, over before 12 kills
    runs = _runs(clean, SMOKE_KILLS, max_seeds=40)
    chaos = runs["kills"]
    assert len(chaos.kills) == SMOKE_KILLS, f"the workload ended before {SMOKE_KILLS} kills: {chaos.kills}"
    assert all(chaos.kills_by_component[c] >= 2 for c in COMPONENTS), chaos.kills_by_component
    assert chaos.stats.get("scheduled", 0) > 0 and chaos.stats.get("prepared-pods", 0) > 0, chaos.stats
    assert chaos.retries > 0, "no API call needed a retry: the apiserver kills were not felt"
    # exits nobody asked for are restarted like any exit, as a supervisor does, and reported with their last
    # log error, not failed on (one cause found: another cluster taking a restarting component's port, which
    # testbed/clusters/kwok/ports.py rules out; test_kwok_ports.py)
    print(f"exits without a kill: {chaos.crashes} {chaos.crash_reasons}")
    assert judge(runs) == []


def test_a_seed_fails_with_what_failed_and_runs_its_planned_steps_once(clean, monkeypatch) -> None:
    campaign = clean.campaign
    plan = campaign.plan(1)
    arrivals = [[s.pod.name for s in steps if isinstance(s, Arrive)] for steps in plan]
    assert len(arrivals) > 1 and len(arrivals[1]) > 1, arrivals
    # harness hiccups from the second example's second arrival on, as kills cause them at any step: drawn live,
    # Hypothesis replayed the failing example to confirm it, the replay failed at its first arrival, earlier
    # than the first run, and the seed's verdict was harness:FlakyStrategyDefinition instead of what failed
    first_bad = len(arrivals[0]) + 2
    arrive, calls = Runner.arrive, []

    def hiccup(self, pod) -> bool:
        calls.append(pod.name)
        if len(calls) >= first_bad:
            raise WaitTimeout(f"injected: pod {pod.name} not seen")
        return arrive(self, pod)

    monkeypatch.setattr(runner_module.Runner, "arrive", hiccup)
    result = campaign.run_seed(1)
    assert result.categories == ["harness:WaitTimeout"] and "injected" in result.messages[0], result
    assert calls == [name for names in arrivals for name in names][:first_bad], calls  # the plan's, each once
    monkeypatch.undo()
    again = campaign.run_seed(1)
    assert again.verdict == "pass" and again.workload == result.workload and again.examples == len(plan), again


def _whole_gpu_pod(name: str) -> PodSpec:
    request = Request("r0", (SubRequest("r0", current_identity().gpu_class),))
    return PodSpec(name, (PodClaim("t0", template=ClaimSpec((request,))),))


def test_a_killed_schedulers_downtime_is_excused_a_stalled_scheduler_still_fails(clean) -> None:
    campaign, supervisor = clean.campaign, clean.campaign.supervisor
    scheduler = supervisor.of_kind("scheduler")[0]
    bound, down = 15.0, 35.0
    runner = Runner(campaign.api, campaign.layout_yaml, bound=bound, excused=campaign.excused).open()
    try:
        supervisor.delay = down  # the restart comes `down` s after the kill: longer than the bound
        try:
            supervisor.kill(scheduler.name)
            started = time.monotonic()
            assert runner.arrive(_whole_gpu_pod("after-kill"))  # no completeness failure: the wait outlived the bound
            waited = time.monotonic() - started
        finally:
            supervisor.delay = 1.0
        assert waited > down > bound and supervisor.wait_running(timeout=120), (waited, scheduler.downtimes)
        runner.depart("after-kill")
        os.kill(scheduler.pid, signal.SIGSTOP)  # blocked, not killed: nothing to excuse
        try:
            with pytest.raises(PropertyFailure) as failure:
                runner.arrive(_whole_gpu_pod("while-stalled"))
        finally:
            os.kill(scheduler.pid, signal.SIGCONT)
        assert [v.property for v in failure.value.violations] == ["completeness"], failure.value
        assert f"within {bound:.0f}s" in str(failure.value), failure.value
    finally:
        runner.close()


# `nox -s campaign` runs every fault of CAUGHT_AS with more kills; here the double allocation, whose seeds fail at
# once (a leak waits out its quiet time per leaking example)
SMOKE_FAULTS = ("counters-undeclared",)
CALM_SEEDS = range(6)  # seeds drawn without kills first; those that meet the fault are run again with kills


@pytest.mark.parametrize("fault", SMOKE_FAULTS)
def test_the_campaign_reports_the_fault(bed, fault: str) -> None:
    # Whether a seed meets the fault is its workload's doing (a whole-GPU pod after a MIG pod on the same GPU) and,
    # for some seeds, the kills' (a restarted component can move the next pod to the other GPU: seed 1 met it
    # calmly, not with 6 kills). So the seeds that meet it calmly (0, 1, 4 today) are run again with kills, not
    # whichever seeds the kills left time for: on a loaded machine that was once seed 0 alone, and both runs missed.
    # Only a leak row waits out the short quiet time; a double-allocation row keeps the clean runs' 60 s, so a slow
    # unprepare under load is not a "leak" that ends a seed before it meets the fault.
    label = f"campaign-{fault}"
    quiet = 15.0 if CAUGHT_AS[fault] == "leak" else 60.0
    with bed(CAMPAIGN_LAYOUT, env=fault_env([fault]), label=label, backend="kwok", attempts=2) as testbed:
        with kwok_session(testbed.cluster, CAMPAIGN_LAYOUT, [fault], label=label, examples=3, steps=6, quiet_timeout=quiet) as session:
            calm = session.run(0, seeds=list(CALM_SEEDS))
            met = [s.seed for s in calm.seeds if CAUGHT_AS[fault] in s.categories]
            assert met, f"no seed of {list(CALM_SEEDS)} met the fault {fault} without kills: {calm.verdicts()}"
            # as many kills as the campaign's fault runs (--fault-kills 6)
            runs = {"kills": session.run(6, seeds=met, interval=INTERVAL), "zero kills": calm}
    report = table(runs)
    print(report)
    assert judge(runs) == [], report  # more than zero of what the fault breaks, with kills and without
