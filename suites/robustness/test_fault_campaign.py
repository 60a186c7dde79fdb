"""The fault campaign's smoke: a dozen random kills of the plugin, publisher, scheduler, apiserver and etcd
during generated workloads on KWOK, against the same seeds with zero kills; then the campaign must
report more than zero with each fault it exists to catch.

The long run (100 kills) is `nox -s campaign` (benchmarks/fault_campaign.py).
"""

from __future__ import annotations

import pytest

from fake_gpus.driver.faults import fault_env
from testbed.campaign.chaos import COMPONENTS
from testbed.campaign.report import CAUGHT_AS, judge, table
from testbed.campaign.session import CAMPAIGN_LAYOUT, kwok_session

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

SMOKE_KILLS = 12
INTERVAL = (3.0, 6.0)


def _campaign(bed, faults: list[str], label: str, kills: int, max_seeds: int, examples: int, **settings) -> dict:
    with bed(CAMPAIGN_LAYOUT, env=fault_env(faults), label=label, backend="kwok", attempts=2) as testbed:
        with kwok_session(testbed.cluster, CAMPAIGN_LAYOUT, faults, label=label, examples=examples, steps=6, **settings) as session:
            chaos = session.run(kills, max_seeds=max_seeds, interval=INTERVAL)
            calm = session.run(0, seeds=[s.seed for s in chaos.seeds])
    runs = {"kills": chaos, "zero kills": calm}
    print(table(runs))
    return runs


def test_a_dozen_kills_lose_leak_and_double_allocate_nothing(bed) -> None:
    # max_seeds bounds the run, the kills end it: on a quiet machine 8 seeds took 38 s, over before 12 kills
    runs = _campaign(bed, [], "campaign", SMOKE_KILLS, max_seeds=40, examples=3)
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


@pytest.mark.parametrize("fault", sorted(CAUGHT_AS))
def test_the_campaign_reports_the_fault(bed, fault: str) -> None:
    # a leak is what is still there 30 s after the claims are gone (clean runs allow 60 s)
    runs = _campaign(bed, [fault], f"campaign-{fault}", 4, max_seeds=3, examples=3, quiet_timeout=30.0)
    assert judge(runs) == []  # more than zero of what the fault breaks, with kills and without
    for label, run in runs.items():
        assert any(CAUGHT_AS[fault] in s.categories for s in run.seeds), f"{label}: {run.verdicts()}"
