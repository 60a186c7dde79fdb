"""One campaign session on a running cluster: the target's processes up, supervised, and runs on demand.

    with kwok_session(cluster, layout, faults) as session:
        chaos = session.run(kills=12)
        calm = session.run(kills=0, seeds=chaos.seed_list())

The cluster must already run our driver with the same `faults` (the publisher reads them at start);
the session only supervises what the cluster runs.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterator

from fake_gpus.driver.identity import current_identity
from testbed.kube.apiretry import RetryingApiClient, retrying_client
from testbed.campaign.kwok import KwokTarget
from testbed.campaign.gpu_failures import GpuFailures
from testbed.campaign.run import Campaign, CampaignResult, Target, run_campaign
from testbed.campaign.supervisor import Supervision, Supervisor
from testbed.clusters.layout import Layout, Mode, NodeSpec
from testbed.workloads.bundle import default_root, layout_yaml

# A partitionable H100 pair (MIG instances, counters, repartitioning) and a whole-GPU H200 pair.
CAMPAIGN_LAYOUT = Layout((
    NodeSpec("dyn-h100", "h100-80gb", 2, Mode("dynamic-mig")),
    NodeSpec("whole-h200", "h200-141gb", 2, Mode("whole")),
), name="fault-campaign")


@dataclass
class Session:
    backend: str
    campaign: Campaign
    api: RetryingApiClient
    faults: list[str]
    progress: Callable[[str], None]

    def run(self, kills: int, seeds: list[int] | None = None, first_seed: int = 0, max_seeds: int = 50,
            interval: tuple[float, float] = (4.0, 10.0), gpu_failures: int = 0) -> CampaignResult:
        """`gpu_failures` GPUs fail (fatal Xid or lost) and heal beside the kills (testbed.campaign.gpu_failures; KWOK)."""
        before = self.api.retries
        failing = None
        if gpu_failures:
            target = self.campaign.target
            if not hasattr(target, "state_dir"):
                raise ValueError(f"GPU failures reach KWOK nodes' fake NVML; this is a {self.backend} campaign")
            dirs = {n.name: target.state_dir(n.name) for n in target.layout.nodes}  # type: ignore[attr-defined]
            failing = GpuFailures(dirs, first_seed + 104729, gpu_failures)
        return run_campaign(self.campaign, self.backend, self.faults, kills, seeds, first_seed, max_seeds, interval,
                            retries=lambda: self.api.retries - before, progress=self.progress, gpu_failures=failing)


@contextmanager
def session_on(backend: str, kubeconfig: Path, layout: Layout, target: Target, supervisor: Supervision, faults: list[str],
               label: str, progress: Callable[[str], None] = print, **campaign_args) -> Iterator[Session]:
    """A Session over an already started target and supervisor."""
    api = retrying_client(str(kubeconfig))
    try:
        campaign = Campaign(api, layout_yaml(layout), target, supervisor, default_root() / "campaign" / label,
                            boards=tuple(sorted({n.board for n in layout.nodes})), context={"faults": ",".join(sorted(faults))},
                            **campaign_args)
        yield Session(backend, campaign, api, list(faults), progress)
    finally:
        api.close()


@contextmanager
def kwok_session(cluster, layout: Layout, faults: list[str], label: str = "kwok", progress: Callable[[str], None] = print,
                 **campaign_args) -> Iterator[Session]:
    """Every unit of the KWOK `cluster` supervised for the session (its driver already runs with `faults`)."""
    target = KwokTarget(cluster.home, cluster.kwok_dir, layout, current_identity().driver)
    with Supervisor(target.start()) as supervisor:  # the units keep running after: the cluster's teardown stops them
        with session_on("kwok", cluster.home / "kubeconfig", layout, target, supervisor, faults, label, progress,
                        **campaign_args) as session:
            yield session
