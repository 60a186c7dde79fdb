"""Drive one mode's KWOK cluster through a trace's events and record what the scheduler did.

Time is compressed to the cluster's own pace: events go in runs of consecutive arrivals or consecutive
departures (in trace order; nothing in a run can change another's outcome but its queue position, which
creation order keeps), and each run is sent once the previous one has settled — arrivals once every pod
has a verdict (`testbed.outcomes.settle`: bound, or refused by a FailedScheduling newer than the pod),
departures once their pods and claims are gone (so their devices are free). A refused pod stays, and the scheduler places it when a departure makes room;
its time to schedule runs from its creation to the watch seeing it bound.
"""

from __future__ import annotations

import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import current_identity
from testbed.beds import bed_session
from testbed.host import progress
from testbed.clusters.base import ClusterSpec
from testbed.clusters.driver import DriverSpec
from testbed.clusters.kwok import KwokCluster
from testbed.clusters.layout import Layout, Mode
from testbed.density.mapping import claim_body, fleet_profiles, pod_body
from testbed.density.metrics import PodRecord, Sample, sample
from testbed.density.placement import cpu_per_gpu, cpu_request, scheduler_config
from testbed.density.sharing import memory_sizes, shared_claim_body
from testbed.density.trace import Event, Trace, TracePod
from testbed.kube.namespaces import create_namespace
from testbed.outcomes.settle import Following

NAMESPACE = "density"
SETTLE_SECONDS = 30.0  # an arrival with no verdict by then is left to the scheduler; the replay moves on


@dataclass
class ModeRun:
    """The outcome of one mode."""

    mode: str
    samples: list[Sample] = field(default_factory=list)
    pods: list[PodRecord] = field(default_factory=list)
    wall_seconds: float = 0.0
    unsettled: int = 0  # arrivals without a verdict within SETTLE_SECONDS


def runs(events: list[Event], batched: bool = True) -> list[list[Event]]:
    """Maximal runs of consecutive events of one kind; one event each unless `batched`."""
    grouped: list[list[Event]] = []
    for event in events:
        if batched and grouped and grouped[-1][0].kind == event.kind:
            grouped[-1].append(event)
        else:
            grouped.append([event])
    return grouped


def fleet_in_mode(fleet: Layout, mode: Mode) -> Layout:
    """The fleet's nodes, every one in `mode`."""
    return Layout(tuple(replace(n, mode=mode) for n in fleet.nodes), name=f"{fleet.name}-{mode}")


def _profiles_by_device(api: client.ApiClient) -> dict[tuple[str, str], str]:
    """(node, device) -> MIG profile name, or "gpu" for a whole GPU, from the published slices."""
    driver = current_identity().driver
    found = {}
    for item in client.ResourceV1Api(api).list_resource_slice().items:
        for device in item.spec.devices or []:
            attrs = device.attributes or {}
            profile = attrs.get("profile") or attrs.get(f"{driver}/profile")
            found[(item.spec.node_name, device.name)] = profile.string if profile else "gpu"
    return found


class Replay:
    """One mode on one cluster: `run(trace)` sends every event and samples after each. `packing`: pods request
    CPU standing for their GPU share, for the packing scheduler profile to score (testbed.density.placement)."""

    def __init__(self, api: client.ApiClient, fleet: Layout, mode: Mode | str, packing: bool = False) -> None:
        self.api = api
        self.core, self.resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        self.identity = current_identity()
        self.mode = mode if isinstance(mode, Mode) else None
        self.profiles = fleet_profiles(n.board for n in fleet.nodes)
        self.sizes = memory_sizes(n.board for n in fleet.nodes)
        self.cpu_per_gpu = cpu_per_gpu(max(n.count for n in fleet.nodes)) if packing else None
        self.memory_gib = {n.name: get_board(n.board).memory_mib / 1024 for n in fleet.nodes}
        self.result = ModeRun(str(mode))
        self.following = Following(api, [NAMESPACE])
        self.created: dict[int, float] = {}
        self.records: dict[int, PodRecord] = {}

    def run(self, trace: Trace, window: int, batched: bool = True) -> ModeRun:
        """`batched`: consecutive arrivals (or departures) go together; else each settles and is sampled alone."""
        create_namespace(self.core, NAMESPACE)
        self.device_profiles = _profiles_by_device(self.api)
        self.following.start()
        started = time.monotonic()
        try:
            events = trace.events(window)
            done = 0
            for run in runs(events, batched):
                (self._arrive if run[0].kind == "arrive" else self._depart)(run)
                after = self._sample(done, run[-1].time)
                # one sample per event (the run's state after it settled), so means weigh every event alike
                self.result.samples += [replace(after, event=done + i, trace_time=e.time) for i, e in enumerate(run)]
                done += len(run)
                if done // 500 != (done - len(run)) // 500:
                    progress.note(f"  {self.result.mode}: {done}/{len(events)} events")
            for index in list(self.created):  # pods the trace never ends
                self._note_placement(index)
        finally:
            self.following.stop()
        self.result.wall_seconds = round(time.monotonic() - started, 1)
        self.result.pods = [self.records[p.index] for p in trace.pods if p.index in self.records]
        return self.result

    def _arrive(self, run: list[Event]) -> None:
        names = []
        for event in run:
            pod, name = event.pod, f"p-{event.pod.index}"
            self.records[pod.index] = PodRecord(pod.index, pod.name, pod.gpu_milli, pod.num_gpu)
            self.resource.create_namespaced_resource_claim(NAMESPACE, self._claim(pod, f"c-{pod.index}"))
            body = pod_body(pod, name, f"c-{pod.index}")
            if self.cpu_per_gpu:
                body["spec"]["containers"][0]["resources"]["requests"] = {"cpu": cpu_request(pod, self.cpu_per_gpu)}
            self.core.create_namespaced_pod(NAMESPACE, body)
            self.created[pod.index] = time.monotonic()
            names.append(name)
        if not self.following.wait(lambda: all(self._verdict(n) is not None for n in names), SETTLE_SECONDS):
            self.result.unsettled += sum(self._verdict(n) is None for n in names)

    def _claim(self, pod: TracePod, name: str) -> dict:
        """A sharing mode's claim asks capacity; every other mode's the MIG-or-whole fallback list."""
        if self.mode is not None and self.mode.shares:
            return shared_claim_body(pod, name, self.mode, self.sizes, self.identity)
        return claim_body(pod, name, self.profiles, self.identity)

    def _pod(self, name: str) -> dict | None:
        return next((p for p in self.following.snapshot.pods.values() if p["metadata"]["name"] == name), None)

    def _verdict(self, name: str) -> str | None:
        pod = self._pod(name)
        return None if pod is None else self.following.snapshot.verdict(pod)

    def _claim_devices(self, index: int) -> list[tuple[str, str]]:
        """(node, device) of the claim's allocation, once its pod is bound."""
        pod = self._pod(f"p-{index}")
        if pod is None or pod["metadata"]["uid"] not in self.following.bound_at:
            return []
        claim = self.following.snapshot.claims.get((NAMESPACE, f"c-{index}")) or {}
        results = (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
        return [(r["pool"], r["device"]) for r in results]

    def _depart(self, run: list[Event]) -> None:
        indices = [event.pod.index for event in run]
        for index in indices:
            self._note_placement(index)
            for delete, name in ((self.core.delete_namespaced_pod, f"p-{index}"),
                                 (self.resource.delete_namespaced_resource_claim, f"c-{index}")):
                try:
                    delete(name, NAMESPACE, grace_period_seconds=0)
                except ApiException as exc:
                    if exc.status != 404:
                        raise
            self.created.pop(index, None)
        claims = self.following.snapshot.claims
        self.following.wait(lambda: not any((NAMESPACE, f"c-{i}") in claims or self._pod(f"p-{i}") for i in indices), SETTLE_SECONDS)

    def _note_placement(self, index: int) -> None:
        """Record a departing pod's wait and devices (a pod placed late is seen here, before it goes)."""
        with self.following.changed:
            pod = self._pod(f"p-{index}")
            bound = self.following.bound_at.get(pod["metadata"]["uid"]) if pod else None
            if bound is None:
                return
            record = self.records[index]
            record.seconds_to_schedule = round(bound - self.created[index], 3)
            record.devices = [self.device_profiles.get(d, "?") for d in self._claim_devices(index)]

    def _sample(self, number: int, trace_time: int) -> Sample:
        with self.following.changed:
            alive = {index: (self.records[index].gpu_milli / 1000, self._claim_devices(index)) for index in self.created}
        return sample(number, trace_time, alive, self.memory_gib)


def run_mode(trace: Trace, fleet: Layout, mode: Mode, k8s: str, window: int, cluster_name: str = "density",
             driver: DriverSpec | None = None, scheduler_profile: str = "default", batched: bool = True) -> ModeRun:
    """Bring up the fleet in `mode` under `scheduler_profile`, replay the trace, tear the cluster down (also on failure)."""
    # kwokctl copies the scheduler's configuration into its own directory when it creates the cluster
    with tempfile.TemporaryDirectory(prefix="density-scheduler-") as scratch:
        config = scheduler_config(scheduler_profile, Path(scratch))
        spec = ClusterSpec(name=cluster_name, k8s=k8s, layout=fleet_in_mode(fleet, mode), driver=driver or DriverSpec(),
                           scheduler_config=str(config) if config else None)
        with bed_session(spec, KwokCluster(cluster_name)) as bed:
            with progress.step(f"replaying {len(trace.pods)} GPU pods in mode {mode} ({scheduler_profile} scheduler)"):
                return Replay(bed.api, fleet, mode, packing=config is not None).run(trace, window, batched)
