"""Waiting until scheduling has settled: every pod bound, or refused by the scheduler after its last change.

A pod's last change is its creation or the last write to one of its ResourceClaims (created by the controller,
allocated or reserved for another pod sharing it); a FailedScheduling event written after that is the
scheduler's verdict on the pod as it stands. "After" compares resourceVersions, which one etcd orders
across resources (event timestamps have microseconds, object timestamps only seconds, and a failure
just before a shared claim was allocated is no verdict); clusters whose resourceVersions are not
integers fall back to timestamps. Pods, events and claims are followed with watches (one thread each,
list then watch from its resourceVersion), never by sleeping.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Callable, Iterable, Sequence

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from testbed.kube.apiviews import dynamic_client

WATCH_SLICE = 5  # seconds per watch request, so that the threads notice the end promptly


def timestamp(text: str | None) -> datetime | None:
    """An RFC 3339 (micro)time as the API writes it."""
    if not text:
        return None
    return datetime.fromisoformat(text.replace("Z", "+00:00")).astimezone(timezone.utc)


def event_time(event: dict) -> datetime | None:
    """When an event last happened: its series' last observation, its eventTime, or lastTimestamp."""
    series = event.get("series") or {}
    return (timestamp(series.get("lastObservedTime")) or timestamp(event.get("eventTime"))
            or timestamp(event.get("lastTimestamp")) or timestamp(event.get("firstTimestamp")))


def claim_names(pod: dict) -> list[str]:
    """Names of the ResourceClaims a pod uses, as far as they are known yet."""
    names = [c["resourceClaimName"] for c in (pod.get("spec") or {}).get("resourceClaims") or [] if c.get("resourceClaimName")]
    status = pod.get("status") or {}
    names += [s["resourceClaimName"] for s in status.get("resourceClaimStatuses") or [] if s.get("resourceClaimName")]
    extended = status.get("extendedResourceClaimStatus") or {}
    if extended.get("resourceClaimName"):
        names.append(extended["resourceClaimName"])
    return names


@dataclass
class Snapshot:
    """What the watches saw last: pods by uid, FailedScheduling events by pod uid, claims by (namespace, name)."""

    namespaces: tuple[str, ...]
    pods: dict[str, dict] = field(default_factory=dict)
    events: dict[str, list[dict]] = field(default_factory=dict)
    claims: dict[tuple[str, str], dict] = field(default_factory=dict)
    allocated: dict[tuple[str, str], dict] = field(default_factory=dict)  # each claim as last seen allocated
    objects: dict[tuple[str, str, str], dict] = field(default_factory=dict)  # other kinds followed: (kind, namespace, name)
    settled: bool = False
    seconds: float = 0.0

    def latest_failure(self, pod: dict) -> dict | None:
        """The pod's newest FailedScheduling event."""
        events = self.events.get(pod["metadata"]["uid"], [])
        return max(events, key=lambda e: event_time(e) or datetime.min.replace(tzinfo=timezone.utc), default=None)

    def _claims_of(self, pod: dict) -> list[dict]:
        namespace = pod["metadata"]["namespace"]
        return [self.claims[(namespace, n)] for n in claim_names(pod) if (namespace, n) in self.claims]

    def refused_after_last_change(self, pod: dict, failure: dict) -> bool:
        # the pod itself needs no comparison: an event about its uid comes after its creation
        versions = [_version(failure)] + [_version(c) for c in self._claims_of(pod)]
        if all(isinstance(v, int) for v in versions):
            return versions[0] > max(versions[1:], default=0)
        times = [timestamp(pod["metadata"]["creationTimestamp"])]
        times += [timestamp(c["metadata"]["creationTimestamp"]) for c in self._claims_of(pod)]
        failed = event_time(failure)
        return failed is not None and failed >= max(t for t in times if t is not None)

    def verdict(self, pod: dict) -> str | None:
        """`bound` (once its claims are seen allocated), `unschedulable` (refused after its last change), `gated`,
        or None while undecided."""
        if (pod.get("spec") or {}).get("nodeName"):
            # the scheduler writes a claim's allocation before it binds the pod, but the claims' watch may deliver
            # it after the pods' watch delivered the binding: until then the pod's devices are not known
            namespace = pod["metadata"]["namespace"]
            return "bound" if all((namespace, name) in self.allocated for name in claim_names(pod)) else None
        if (pod.get("spec") or {}).get("schedulingGates"):
            return "gated"
        failure = self.latest_failure(pod)
        if failure is not None and self.refused_after_last_change(pod, failure):
            return "unschedulable"
        return None

    def undecided(self) -> list[dict]:
        return [p for p in self.pods.values() if self.verdict(p) is None]


class _Follower(threading.Thread):
    """Lists then watches one resource cluster-wide, putting (kind, type, object) on a queue."""

    def __init__(self, resource, kind: str, out: queue.Queue, stop: threading.Event, **selectors: str) -> None:
        super().__init__(daemon=True, name=f"settle-{kind}")
        self.resource, self.kind, self.out, self.stop, self.selectors = resource, kind, out, stop, selectors

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                listing = self.resource.get(**self.selectors).to_dict()
                for item in listing.get("items") or []:
                    self.out.put((self.kind, "ADDED", item))
                self.out.put((self.kind, "LISTED", None))
                version = listing["metadata"]["resourceVersion"]
                try:
                    while not self.stop.is_set():
                        for event in self.resource.watch(resource_version=version, timeout=WATCH_SLICE, **self.selectors):
                            raw = event["raw_object"]
                            version = raw["metadata"].get("resourceVersion", version)
                            self.out.put((self.kind, event["type"], raw))
                            if self.stop.is_set():
                                return
                except ApiException as exc:
                    if exc.status != 410:  # expired resourceVersion: list again
                        raise
        except Exception as exc:  # noqa: BLE001 - reported to the waiting thread, which raises it
            self.out.put((self.kind, "ERROR", exc))


def _followers(api: client.ApiClient, feed: queue.Queue, stop: threading.Event,
               extra: Sequence[tuple[str, str]] = ()) -> list[_Follower]:
    """One follower each for pods, FailedScheduling events and ResourceClaims, and for each (apiVersion, kind) of `extra`."""
    dyn = dynamic_client(api)
    return [
        _Follower(dyn.resources.get(api_version="v1", kind="Pod"), "pod", feed, stop),
        _Follower(dyn.resources.get(api_version="v1", kind="Event"), "event", feed, stop, field_selector="reason=FailedScheduling"),
        _Follower(dyn.resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim"), "claim", feed, stop),
    ] + [_Follower(dyn.resources.get(api_version=version, kind=kind), kind, feed, stop) for version, kind in extra]


def settle(api: client.ApiClient, namespaces: Iterable[str], expected_pods: int = 0, timeout: float = 120.0,
           complete: Callable[[Snapshot], bool] | None = None, extra: Sequence[tuple[str, str]] = ()) -> Snapshot:
    """Follow pods, FailedScheduling events and claims of `namespaces` until every pod has a verdict.

    `expected_pods`: how many pods the workloads will create; fewer seen means not settled yet.
    `complete(snapshot)`: whether the workloads have made every pod they will (for those whose count the
    spec does not say); `extra`: further (apiVersion, kind)s to follow into `snapshot.objects` for it.
    Returns the last snapshot; `settled` is False when `timeout` passed first.
    """
    wanted = tuple(namespaces)
    snapshot = Snapshot(wanted)
    started = time.monotonic()
    feed: queue.Queue = queue.Queue()
    stop = threading.Event()
    followers = _followers(api, feed, stop, extra)
    listed: set[str] = set()
    for follower in followers:
        follower.start()
    try:
        while True:
            if (len(listed) == len(followers) and len(snapshot.pods) >= expected_pods and not snapshot.undecided()
                    and (complete is None or complete(snapshot))):
                snapshot.settled = True
                break
            remaining = timeout - (time.monotonic() - started)
            if remaining <= 0:
                break
            try:
                kind, change, obj = feed.get(timeout=remaining)
            except queue.Empty:
                break
            if change == "ERROR":
                raise obj
            if change == "LISTED":
                listed.add(kind)
                continue
            _record(snapshot, kind, change, obj)
    finally:
        stop.set()
    snapshot.seconds = time.monotonic() - started
    return snapshot


class Following:
    """A snapshot kept current by the same watches as `settle` until `stop()`, for callers that change the
    cluster step by step and wait for each step's verdicts (density replays); `bound_at` holds, per pod
    uid, the monotonic time the watch first saw it bound."""

    def __init__(self, api: client.ApiClient, namespaces: Iterable[str]) -> None:
        self.snapshot = Snapshot(tuple(namespaces))
        self.bound_at: dict[str, float] = {}
        self.changed = threading.Condition()  # held while reading the snapshot; notified on every change
        self._feed: queue.Queue = queue.Queue()
        self._stop = threading.Event()
        self._error: BaseException | None = None
        self._followers = _followers(api, self._feed, self._stop)

    def start(self) -> None:
        for follower in self._followers:
            follower.start()
        threading.Thread(target=self._consume, daemon=True, name="settle-following").start()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, predicate, timeout: float) -> bool:
        """Block until `predicate()` holds (True) or `timeout` passes (False); a watch failure is raised."""
        deadline = time.monotonic() + timeout
        with self.changed:
            while not predicate():
                if self._error is not None:
                    raise self._error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self.changed.wait(remaining)
            return True

    def _consume(self) -> None:
        while not self._stop.is_set():
            try:
                kind, change, obj = self._feed.get(timeout=1)
            except queue.Empty:
                continue
            with self.changed:
                if change == "ERROR":
                    self._error = obj
                elif change != "LISTED":
                    _record(self.snapshot, kind, change, obj)
                    if kind == "pod" and change != "DELETED" and (obj.get("spec") or {}).get("nodeName"):
                        self.bound_at.setdefault(obj["metadata"]["uid"], time.monotonic())
                self.changed.notify_all()


def _version(obj: dict) -> int | None:
    text = (obj.get("metadata") or {}).get("resourceVersion", "")
    return int(text) if text.isdigit() else None


def _record(snapshot: Snapshot, kind: str, change: str, obj: dict) -> None:
    meta = obj.get("metadata") or {}
    if kind == "event":
        involved = obj.get("involvedObject") or {}
        if involved.get("kind") == "Pod" and involved.get("namespace") in snapshot.namespaces and change != "DELETED":
            events = snapshot.events.setdefault(involved.get("uid", ""), [])
            events[:] = [e for e in events if e["metadata"]["uid"] != meta.get("uid")] + [obj]
        return
    if meta.get("namespace") not in snapshot.namespaces:
        return
    if kind == "pod":
        if change == "DELETED":
            snapshot.pods.pop(meta["uid"], None)
        else:
            snapshot.pods[meta["uid"]] = obj
    elif kind == "claim":
        key = (meta["namespace"], meta["name"])
        if change == "DELETED":
            snapshot.claims.pop(key, None)
        else:
            snapshot.claims[key] = obj
            if (obj.get("status") or {}).get("allocation"):
                # kept: the claim of a pod that has finished (a Job's) is deallocated and deleted soon after
                snapshot.allocated[key] = obj
    else:
        if change == "DELETED":
            snapshot.objects.pop((kind, meta["namespace"], meta["name"]), None)
        else:
            snapshot.objects[(kind, meta["namespace"], meta["name"])] = obj
