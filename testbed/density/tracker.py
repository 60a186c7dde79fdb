"""Pods and ResourceClaims of one namespace as the watches last saw them, for a replay to wait on.

One thread per resource lists, then watches from the list's resourceVersion (relisting when it expires);
every change wakes the waiting replay through one condition variable, so nothing polls.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

WATCH_SECONDS = 30


@dataclass
class PodState:
    """What the replay needs of a pod: when it was seen bound, or refused, and where."""

    node: str | None = None
    bound_at: float | None = None  # monotonic time the watch first saw spec.nodeName
    unschedulable: bool = False  # the scheduler's PodScheduled=False/Unschedulable


@dataclass
class ClaimState:
    """Allocated devices of a claim as (node, device) pairs."""

    devices: tuple[tuple[str, str], ...] = ()


@dataclass
class Tracker:
    """Follows pods and claims of `namespace`; `wait(predicate)` blocks until it holds."""

    api: client.ApiClient
    namespace: str
    pods: dict[str, PodState] = field(default_factory=dict)
    claims: dict[str, ClaimState] = field(default_factory=dict)
    error: BaseException | None = None
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        core, resource = client.CoreV1Api(self.api), client.ResourceV1Api(self.api)
        # the client cannot tell a v1 ResourceClaim's model from the list's docstring: name it
        for list_func, apply, model in ((core.list_namespaced_pod, self._pod, None),
                                        (resource.list_namespaced_resource_claim, self._claim, "ResourceV1ResourceClaim")):
            threading.Thread(target=self._follow, args=(list_func, apply, model), daemon=True).start()

    def stop(self) -> None:
        self._stop.set()

    def wait(self, predicate: Callable[[], bool], timeout: float) -> bool:
        """Block until `predicate()` holds (True) or `timeout` passes (False); a watch failure is raised."""
        deadline = time.monotonic() + timeout
        with self._changed:
            while not predicate():
                if self.error is not None:
                    raise self.error
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    return False
                self._changed.wait(remaining)
            return True

    # ------------------------------------------------------------------ watches
    def _follow(self, list_func, apply: Callable[[str, object], None], model: str | None) -> None:
        try:
            while not self._stop.is_set():
                listing = list_func(self.namespace)
                with self._changed:
                    for item in listing.items:
                        apply("ADDED", item)
                    self._changed.notify_all()
                version = listing.metadata.resource_version
                stream = watch.Watch(return_type=model)
                try:
                    for event in stream.stream(list_func, self.namespace, resource_version=version, timeout_seconds=WATCH_SECONDS):
                        version = event["object"].metadata.resource_version
                        with self._changed:
                            apply(event["type"], event["object"])
                            self._changed.notify_all()
                        if self._stop.is_set():
                            return
                except ApiException as exc:
                    if exc.status != 410:  # expired: list again
                        raise
                finally:
                    stream.stop()
        except BaseException as exc:  # noqa: BLE001 - handed to the waiting thread
            with self._changed:
                self.error = exc
                self._changed.notify_all()

    def _pod(self, kind: str, pod) -> None:
        name = pod.metadata.name
        if kind == "DELETED":
            self.pods.pop(name, None)
            return
        state = self.pods.setdefault(name, PodState())
        if pod.spec.node_name and state.bound_at is None:
            state.node, state.bound_at = pod.spec.node_name, time.monotonic()
        conditions = (pod.status.conditions if pod.status else None) or []
        state.unschedulable = any(c.type == "PodScheduled" and c.status == "False" and c.reason == "Unschedulable" for c in conditions)

    def _claim(self, kind: str, claim) -> None:
        name = claim.metadata.name
        if kind == "DELETED":
            self.claims.pop(name, None)
            return
        allocation = claim.status.allocation if claim.status else None
        results = (allocation.devices.results or []) if allocation and allocation.devices else []
        self.claims[name] = ClaimState(tuple((r.pool, r.device) for r in results))
