"""Run generated workloads (the allocation state machine) seed by seed while the chaos kills components.

A seed's examples are drawn first, without the cluster (testbed.workloads.plan), then run once each, so
what a seed runs never depends on what the kills did and a failure is never replayed. Every step is
checked by the runner as usual (soundness, completeness, fallback, liveness), its bounds counted in
time the cluster was up (a killed component's downtime is excused, a stall of its own is not). The
campaign adds: every scheduled pod's claims get prepared by the node's plugin before the next step;
once the example's pods and claims are gone, nothing is left on the nodes (MIG instances, CDI specs,
checkpoint entries). Before every kill it observes the whole cluster: no device or counter held twice
by allocations, no device prepared for two claims. A seed's verdict is `pass` or the sorted list of
what failed; the same seeds with zero kills must give the same verdicts.
"""

from __future__ import annotations

import hashlib
import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Protocol

from kubernetes import client

from testbed.campaign.audit import Leaks, NodeState, double_prepared, leaks
from testbed.campaign.chaos import BACK_TIMEOUT, COMPONENTS, Chaos, Kill
from testbed.campaign.gpu_failures import GpuFailures
from testbed.campaign.supervisor import Supervision
from testbed.workloads.devices import Inventory
from testbed.workloads.observe import Snapshot, observe_claims
from testbed.workloads.oracle import check_usage
from testbed.workloads.plan import plan_examples
from testbed.workloads.runner import PropertyFailure, Runner, allowed_wait
from testbed.workloads.steps import Arrive, Step
from testbed.workloads.truth import physical_violations


class Target(Protocol):
    """A backend's side of the campaign: the nodes' driver state, and whether a pod's claims are prepared."""

    def node_states(self) -> list[NodeState]: ...

    def prepared(self, pod) -> bool: ...


class LeakFailure(AssertionError):
    def __init__(self, found: Leaks) -> None:
        self.leaks = found
        super().__init__("left on the nodes after the example: " + "; ".join((found.mig + found.cdi + found.prepared)[:6]))


class PrepareFailure(AssertionError):
    """A bound pod's claims were not prepared in time."""


@dataclass
class SeedResult:
    seed: int
    verdict: str  # "pass", or "fail: <categories>"
    categories: list[str]
    messages: list[str]
    examples: int
    workload: str  # digest of every example's steps: the same seed ran the same workload
    wall: float
    leaks: int = 0
    double_allocations: int = 0


@dataclass
class CampaignResult:
    backend: str
    faults: list[str]
    seeds: list[SeedResult] = field(default_factory=list)
    kills: list[Kill] = field(default_factory=list)
    kills_asked: int = 0
    kills_by_component: dict[str, int] = field(default_factory=dict)
    crashes: dict[str, int] = field(default_factory=dict)  # exits nobody asked for, per unit
    crash_reasons: dict[str, list[str]] = field(default_factory=dict)  # their distinct last log errors, per unit
    downtime: dict[str, float] = field(default_factory=dict)  # mean seconds kill -> serving again, per component
    observed_double: list[str] = field(default_factory=list)  # found by the observations before kills
    final_leaks: dict[str, list[str]] = field(default_factory=dict)
    retries: int = 0  # API calls retried through restarts
    errors: list[str] = field(default_factory=list)
    unrecovered: list[str] = field(default_factory=list)  # units or the cluster not back in time: findings, not notes
    wall: float = 0.0

    stats: dict[str, int] = field(default_factory=dict)
    gpu_failures: dict[str, int] = field(default_factory=dict)  # GPUs failed and healed beside the kills, per action

    @property
    def leaks(self) -> int:
        return sum(s.leaks for s in self.seeds) + sum(len(v) for v in self.final_leaks.values())

    @property
    def double_allocations(self) -> int:
        return sum(s.double_allocations for s in self.seeds) + len(self.observed_double)

    def verdicts(self) -> dict[int, str]:
        return {s.seed: s.verdict for s in self.seeds}

    def as_dict(self) -> dict:
        return {"backend": self.backend, "faults": self.faults, "wall_s": round(self.wall, 1),
                "kills": len(self.kills), "kills_asked": self.kills_asked, "kills_by_component": self.kills_by_component, "crashes": self.crashes, "crash_reasons": self.crash_reasons,
                "mean_downtime_s": self.downtime, "api_retries": self.retries, "stats": self.stats,
                "leaks": self.leaks, "double_allocations": self.double_allocations,
                "gpu_failures": self.gpu_failures,
                "observed_double": self.observed_double[:20], "final_leaks": self.final_leaks, "errors": self.errors,
                "unrecovered": self.unrecovered,
                "seeds": [s.__dict__ for s in self.seeds], "kill_log": [k.__dict__ for k in self.kills]}


def _flatten(exc: BaseException) -> Iterator[BaseException]:
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from _flatten(inner)
    else:
        yield exc


def classify(exc: BaseException) -> tuple[list[str], list[str], int, int]:
    """(categories, messages, leaks, double allocations) of a failed seed's exception."""
    categories, messages, leaked, double = set(), [], 0, 0
    for e in _flatten(exc):
        if isinstance(e, PropertyFailure):
            for v in e.violations:
                kind = "double-allocation" if v.double else v.property
                double += kind == "double-allocation"
                categories.add(kind)
                messages.append(f"[{kind}] {v.message}")
        elif isinstance(e, LeakFailure):
            categories.add("leak")
            leaked += e.leaks.total
            messages.append(str(e))
        elif isinstance(e, PrepareFailure):
            categories.add("not-prepared")
            messages.append(str(e))
        else:  # the harness itself: a timeout or error it did not ride out
            categories.add(f"harness:{type(e).__name__}")
            messages.append(f"{type(e).__name__}: {e}"[:500])
    return sorted(categories), messages[:10], leaked, double


@dataclass
class Campaign:
    """Workloads on one cluster (`api`, a RetryingApiClient) with its `target` and `supervisor`."""

    api: client.ApiClient
    layout_yaml: str
    target: Target
    supervisor: Supervision
    bundles: Path
    examples: int = 3
    steps: int = 6
    boards: tuple[str, ...] = ()
    mig_percent: int = 50
    # seconds of up time the scheduler gets per pod (and the plugin per prepare): the time a killed component
    # was down or coming back is added to each wait as the supervisor measured it (outages.py), not guessed
    bound: float = 90.0
    # seconds more a bound pod's prepare may take on real kubelets (kind): a device a departure freed can go to
    # the next pod while the kubelet still holds it for the old claim (the claim is released once the pod is
    # terminal, and the kubelet unprepares after that); the driver refuses that prepare ("still prepared") and
    # the kubelet tries again at its next pod sync, syncFrequency 1 min jittered by up to half: 65-72 s in
    # kind's logs. Without it a zero-kill kind run failed seed 4 ("not prepared within 90s") at load 20.
    prepare_retry: float = 0.0
    quiet_timeout: float = 60.0  # seconds for the nodes to release what an example's claims held
    ready_timeout: float = 420.0  # seconds for the cluster to be back before a seed (a kubelet backs off up to 5 min)
    context: dict = field(default_factory=dict)
    stats: dict[str, int] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self.resource = client.ResourceV1Api(self.api)
        self.core = client.CoreV1Api(self.api)

    # --- observations ---

    def observe(self) -> list[str]:
        """The whole cluster now: what is allocated or prepared twice (each caller keeps its own findings, so a
        chaos thread that outlives its run cannot put them into the next run's)."""
        states = self.target.node_states()  # first: a claim deallocated after this read is not in `allocated` below
        snap = Snapshot(Inventory.from_api(self.resource), observe_claims(self.resource))
        problems = [v.message for v in check_usage(snap.inventory, snap.allocations()) + physical_violations(snap.inventory, snap.allocations())
                    if v.double]
        problems += double_prepared(states, {(c.namespace, c.name) for c in snap.claims if c.results})
        self._count("observations")
        return problems

    def wait_ready(self) -> bool:
        """Every supervised unit runs again and the API answers (within `ready_timeout`)."""
        deadline = time.monotonic() + self.ready_timeout
        if not self.supervisor.wait_running(timeout=self.ready_timeout):
            return False
        while True:
            try:
                self.core.list_namespace(limit=1)
                return True
            except Exception:  # noqa: BLE001 - not answering yet (the client has retried already)
                if time.monotonic() > deadline:
                    return False
                time.sleep(1.0)

    def excused(self, t0: float, t1: float) -> float:
        """Seconds of [t0, t1] some killed component was down or coming back (the supervisor measured it)."""
        return self.supervisor.outages.excused(t0, t1)

    def _spent(self, start: float, bound: float) -> bool:
        """`bound` seconds of up time, and the clients' catch-up after kills, have passed since `start`."""
        now = time.monotonic()
        return now - start > allowed_wait(bound, self.excused(start, now))

    def leftovers(self, timeout: float | None = None) -> Leaks:
        """What the nodes still hold for claims that are gone, once it stops shrinking (or `timeout` of up time)."""
        start, bound = time.monotonic(), self.quiet_timeout if timeout is None else timeout
        while True:
            live = {c.metadata.uid for c in self.resource.list_resource_claim_for_all_namespaces().items}
            found = leaks(self.target.node_states(), live)
            if not found.total or self._spent(start, bound):
                return found
            time.sleep(0.5)

    def _wait_prepared(self, namespace: str) -> None:
        start, bound = time.monotonic(), self.bound + self.prepare_retry
        while True:
            pods = [p for p in self.core.list_namespaced_pod(namespace).items
                    if p.spec.node_name and p.spec.resource_claims and p.metadata.deletion_timestamp is None]
            waiting = [p.metadata.name for p in pods if not self.target.prepared(p)]
            if not waiting:
                self._count("prepared-pods", len(pods))
                return
            if self._spent(start, bound):
                raise PrepareFailure(f"pods {waiting} are bound but their claims were not prepared within {bound:.0f}s "
                                     f"(+{allowed_wait(bound, self.excused(start, time.monotonic())) - bound:.0f}s for killed "
                                     f"components to come back and their clients to retry)")
            time.sleep(0.5)

    def _count(self, key: str, n: int = 1) -> None:
        self.stats[key] = self.stats.get(key, 0) + n

    # --- one seed ---

    def plan(self, seed: int) -> list[list[Step]]:
        """The seed's examples, drawn before anything runs: the same whatever the cluster does."""
        return plan_examples(seed, self.examples, self.steps, self.boards, self.mig_percent)

    def run_seed(self, seed: int) -> SeedResult:
        """The seed's examples one after another, each once; the first failure is the seed's verdict."""
        plan = self.plan(seed)
        digest = hashlib.sha256("\n".join(json.dumps([s.to_json() for s in steps], sort_keys=True) for steps in plan).encode()).hexdigest()[:12]
        start = time.monotonic()
        categories, messages, leaked, double, ran = [], [], 0, 0, 0
        try:
            for index, steps in enumerate(plan):
                ran += 1
                self._run_example(seed, index, steps)
        except Exception as exc:  # noqa: BLE001 - every failure is a verdict, sorted by classify
            categories, messages, leaked, double = classify(exc)
        verdict = "pass" if not categories else "fail: " + ", ".join(categories)
        return SeedResult(seed, verdict, categories, messages, ran, digest, round(time.monotonic() - start, 1), leaked, double)

    def _run_example(self, seed: int, index: int, steps: list[Step]) -> None:
        """One example's steps in a namespace of its own, checked as they run; every scheduled pod's claims
        prepared before the next step; afterwards nothing left on the nodes."""
        runner = Runner(self.api, self.layout_yaml, bundle_dir=self.bundles / f"seed-{seed}", bound=self.bound, excused=self.excused,
                        context={**self.context, "seed": seed, "example": index}).open()
        arrive = runner.arrive

        def arrive_prepared(pod) -> bool:
            # a scheduled pod's claims are prepared before the next step (as a pod turns Running):
            # otherwise a slow prepare under kills lets pods leave unprepared and hides node-side faults
            scheduled = arrive(pod)
            if scheduled:
                self._wait_prepared(runner.namespace)
            return scheduled

        runner.arrive = arrive_prepared  # type: ignore[method-assign]
        outcome = "interrupted"
        try:
            runner.run_steps(steps)
            self._wait_prepared(runner.namespace)
            outcome = "passed"
        except Exception:
            outcome = "failed"
            raise
        finally:
            arrivals = [s.pod for s in runner.steps if isinstance(s, Arrive)]
            self._count("examples")
            self._count("pods", len(arrivals))
            self._count("claims", sum(len(p.claims) for p in arrivals))
            for key, value in runner.stats.items():
                self._count(key, value)
            # Ctrl-C or SIGTERM: no waiting for the namespace to empty, the cluster goes as a whole (waiting here,
            # and in the Hypothesis teardowns before, made a benchmark sit through two Ctrl-Cs without a word)
            if outcome != "interrupted":
                try:
                    runner.close()
                except Exception:  # noqa: BLE001
                    if outcome == "passed":
                        raise
                    # else the steps' failure is the verdict, not the clean-up that failed after it
        found = self.leftovers()
        if found.total:
            raise LeakFailure(found)


def run_campaign(campaign: Campaign, backend: str, faults: list[str], kills: int, seeds: list[int] | None = None,
                 first_seed: int = 0, max_seeds: int = 50, interval: tuple[float, float] = (4.0, 10.0),
                 kinds: tuple[str, ...] = COMPONENTS, retries: Callable[[], int] = lambda: 0,
                 progress: Callable[[str], None] = lambda line: None,
                 gpu_failures: GpuFailures | None = None) -> CampaignResult:
    """Seeds `seeds` (or first_seed, first_seed+1, ... until `kills` kills are done) under the chaos, and GPUs
    failing and healing beside it (`gpu_failures`, started with the chaos, every GPU healed after the seeds)."""
    result = CampaignResult(backend, sorted(faults), kills_asked=kills)
    crashed = {u.name: u.crashes for u in campaign.supervisor.units.values()}
    reasons_before = {u.name: len(u.exit_reasons) for u in campaign.supervisor.units.values()}
    downtimes_before = {u.name: len(u.downtimes) for u in campaign.supervisor.units.values()}  # a session runs several
    campaign.stats.clear()  # counts are per run
    start = time.monotonic()
    if gpu_failures is not None:
        gpu_failures.__enter__()
    with Chaos(campaign.supervisor, first_seed + 7919, kills, interval, kinds, observe=campaign.observe) as chaos:
        todo = list(seeds) if seeds is not None else None
        n = 0
        while True:
            if todo is not None:
                if n >= len(todo):
                    break
                current = todo[n]
            else:
                if (chaos.over and n > 0) or n >= max_seeds:
                    break
                current = first_seed + n
            n += 1
            # never start a seed on a cluster still coming back (a kubelet's back-off can keep a static pod down
            # for minutes): on kind 46 seeds once failed at their first call, in no time, after 8 kills
            if not campaign.wait_ready():
                result.unrecovered.append(f"seed {current}: the cluster was not back (every unit running, API answering) "
                                          f"within {campaign.ready_timeout:.0f}s; no further seeds")
                break
            outcome = campaign.run_seed(current)
            result.seeds.append(outcome)
            progress(f"seed {current}: {outcome.verdict} ({outcome.examples} examples, {outcome.wall:.0f}s, kills so far {len(chaos.kills)})")
    if gpu_failures is not None:  # healed before the final audit: it judges a whole bed
        gpu_failures.__exit__(None, None, None)
        result.gpu_failures, result.errors = gpu_failures.counts(), result.errors + gpu_failures.errors
    if not campaign.supervisor.wait_running(timeout=BACK_TIMEOUT):
        result.unrecovered.append(f"not every unit served again {BACK_TIMEOUT:.0f} s after the last kill")
    final: list[str] = []
    try:
        final = campaign.observe()
    except Exception as exc:  # noqa: BLE001
        result.errors.append(f"final observation failed: {type(exc).__name__}: {exc}"[:300])
    try:
        result.final_leaks = {k: v for k, v in campaign.leftovers().as_dict().items() if v}
    except Exception as exc:  # noqa: BLE001 - the run's results stand; what could not be checked is a finding
        result.unrecovered.append(f"the final leak check failed: {type(exc).__name__}: {exc}"[:300])
    result.kills, result.kills_by_component, result.errors = list(chaos.kills), chaos.by_kind(), result.errors + chaos.errors
    result.unrecovered = chaos.unrecovered + result.unrecovered
    units = campaign.supervisor.units.values()
    result.crashes = {u.name: u.crashes - crashed.get(u.name, 0) for u in units if u.crashes - crashed.get(u.name, 0)}
    for u in units:
        new = list(dict.fromkeys(r for r in u.exit_reasons[reasons_before.get(u.name, 0):] if r))
        if new:
            result.crash_reasons[u.name] = new[:5]
    for kind in kinds:
        times = [t for u in units if u.kind == kind for t in u.downtimes[downtimes_before.get(u.name, 0):]]
        if times:
            result.downtime[kind] = round(sum(times) / len(times), 2)
    result.observed_double = chaos.observed + final
    result.stats = dict(campaign.stats)
    result.retries = retries()
    result.wall = time.monotonic() - start
    return result
