"""Drive one mode's KWOK cluster through a trace's events and record what the scheduler did.

Time is compressed to the cluster's own pace: each event is sent once the previous one has settled —
an arrival once its pod is bound or refused by the scheduler, a departure once its claim is gone (so
its devices are free). A refused pod stays, and the scheduler places it when a departure makes room;
its time to schedule runs from its creation to the watch seeing it bound.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field, replace

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import current_identity
from testbed import progress
from testbed.clusters.base import ClusterSpec
from testbed.clusters.kwok import KwokCluster
from testbed.clusters.layout import Layout, Mode
from testbed.density.mapping import claim_body, fleet_profiles, pod_body
from testbed.density.metrics import PodRecord, Sample, sample
from testbed.density.trace import Event, Trace
from testbed.density.tracker import Tracker
from testbed.namespaces import create_namespace

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
    """One mode on one cluster: `run(trace)` sends every event and samples after each."""

    def __init__(self, api: client.ApiClient, fleet: Layout, mode: str) -> None:
        self.api = api
        self.core, self.resource = client.CoreV1Api(api), client.ResourceV1Api(api)
        self.identity = current_identity()
        self.profiles = fleet_profiles(n.board for n in fleet.nodes)
        self.memory_gib = {n.name: get_board(n.board).memory_mib / 1024 for n in fleet.nodes}
        self.result = ModeRun(mode)
        self.tracker = Tracker(api, NAMESPACE)
        self.created: dict[int, float] = {}
        self.records: dict[int, PodRecord] = {}

    def run(self, trace: Trace, window: int) -> ModeRun:
        create_namespace(self.core, NAMESPACE)
        self.device_profiles = _profiles_by_device(self.api)
        self.tracker.start()
        started = time.monotonic()
        try:
            events = trace.events(window)
            for number, event in enumerate(events):
                (self._arrive if event.kind == "arrive" else self._depart)(event)
                self.result.samples.append(self._sample(number, event.time))
                if number % 500 == 499:
                    progress.note(f"  {self.result.mode}: {number + 1}/{len(events)} events")
            for index in list(self.created):  # pods the trace never ends
                self._note_placement(index)
        finally:
            self.tracker.stop()
        self.result.wall_seconds = round(time.monotonic() - started, 1)
        self.result.pods = [self.records[p.index] for p in trace.pods if p.index in self.records]
        return self.result

    def _arrive(self, event: Event) -> None:
        pod, name = event.pod, f"p-{event.pod.index}"
        self.records[pod.index] = PodRecord(pod.index, pod.name, pod.gpu_milli, pod.num_gpu)
        self.resource.create_namespaced_resource_claim(NAMESPACE, claim_body(pod, f"c-{pod.index}", self.profiles, self.identity))
        self.core.create_namespaced_pod(NAMESPACE, pod_body(pod, name, f"c-{pod.index}"))
        self.created[pod.index] = time.monotonic()

        def decided() -> bool:
            state = self.tracker.pods.get(name)
            return state is not None and (state.bound_at is not None or state.unschedulable)

        if not self.tracker.wait(decided, SETTLE_SECONDS):
            self.result.unsettled += 1

    def _depart(self, event: Event) -> None:
        index = event.pod.index
        self._note_placement(index)
        for delete, name in ((self.core.delete_namespaced_pod, f"p-{index}"),
                             (self.resource.delete_namespaced_resource_claim, f"c-{index}")):
            try:
                delete(name, NAMESPACE, grace_period_seconds=0)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        self.created.pop(index, None)
        self.tracker.wait(lambda: f"c-{index}" not in self.tracker.claims and f"p-{index}" not in self.tracker.pods, SETTLE_SECONDS)

    def _note_placement(self, index: int) -> None:
        """Record a departing pod's wait and devices (a pod placed late is seen here, before it goes)."""
        record, state = self.records[index], self.tracker.pods.get(f"p-{index}")
        if state is None or state.bound_at is None:
            return
        record.seconds_to_schedule = round(state.bound_at - self.created[index], 3)
        claim = self.tracker.claims.get(f"c-{index}")
        record.devices = [self.device_profiles.get(d, "?") for d in (claim.devices if claim else ())]

    def _sample(self, number: int, trace_time: int) -> Sample:
        alive = {}
        with self.tracker._changed:
            for index in self.created:
                pod = self.records[index]
                claim = self.tracker.claims.get(f"c-{index}")
                state = self.tracker.pods.get(f"p-{index}")
                devices = list(claim.devices) if claim and state and state.bound_at is not None else []
                alive[index] = (pod.gpu_milli / 1000, devices)
        return sample(number, trace_time, alive, self.memory_gib)


def run_mode(trace: Trace, fleet: Layout, mode: Mode, k8s: str, window: int, cluster_name: str = "density") -> ModeRun:
    """Bring up the fleet in `mode`, replay the trace, tear the cluster down (also on failure)."""
    cluster = KwokCluster(cluster_name)
    cluster.create(ClusterSpec(name=cluster_name, k8s=k8s, layout=fleet_in_mode(fleet, mode)), force=True)
    try:
        api = cluster.api_client()
        try:
            with progress.step(f"replaying {len(trace.pods)} GPU pods in mode {mode}"):
                return Replay(api, fleet, str(mode)).run(trace, window)
        finally:
            api.close()
    finally:
        cluster.delete()
