"""What each workload will make, so that settling knows when every pod it will have exists.

Deployments, ReplicaSets and Jobs make a number of pods their spec says; a StatefulSet with OrderedReady
(the default) makes pod N+1 only once pod N runs and is Ready, so its pods are complete when all exist or
the newest is refused by the scheduler (then the rest never come); a DaemonSet makes one pod per node it
may run on, which its controller counts (status.desiredNumberScheduled). A CronJob runs on its schedule:
`try` creates it suspended (its schedule would add runs at random moments of the try) and one Job from its
template at once, as `kubectl create job NAME --from=cronjob/CRONJOB` does.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Callable, Mapping, Sequence

from testbed.outcomes.settle import Snapshot

MANUAL = "cronjob.kubernetes.io/instantiate"  # what kubectl marks a Job made from a CronJob with


@dataclass(frozen=True)
class Workload:
    """A workload as created: kind, namespace, the server's name and uid, and the spec it was given."""

    kind: str
    namespace: str
    name: str
    uid: str
    spec: Mapping


def job_from_cronjob(cronjob: Mapping) -> dict:
    """The Job `kubectl create job NAME --from=cronjob/...` makes: the template's metadata and spec, owned by
    the CronJob, named after it (`<cronjob>-manual`, one per try)."""
    template = (cronjob.get("spec") or {}).get("jobTemplate") or {}
    metadata = copy.deepcopy(template.get("metadata") or {})
    metadata["name"] = f"{cronjob['metadata']['name'][:45]}-manual"
    metadata["namespace"] = cronjob["metadata"]["namespace"]
    metadata["annotations"] = {**(metadata.get("annotations") or {}), MANUAL: "manual"}
    metadata["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "CronJob", "name": cronjob["metadata"]["name"],
                                    "uid": cronjob["metadata"]["uid"], "controller": True}]
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": metadata, "spec": copy.deepcopy(template.get("spec") or {})}


def suspended_cronjob(body: Mapping) -> dict:
    """The CronJob as created by `try`: its schedule paused (see the module's note)."""
    return {**body, "spec": {**(body.get("spec") or {}), "suspend": True}}


def fixed_pods(workload: Workload) -> int:
    """Pods the workload will have for sure, from its spec alone (DaemonSets and ordered StatefulSets: see `complete`)."""
    spec = workload.spec
    if workload.kind == "Pod":
        return 1
    if workload.kind in ("Deployment", "ReplicaSet"):
        return int(spec.get("replicas", 1))
    if workload.kind == "StatefulSet":
        return int(spec.get("replicas", 1)) if spec.get("podManagementPolicy") == "Parallel" else min(1, int(spec.get("replicas", 1)))
    if workload.kind == "Job" and not spec.get("suspend"):
        parallelism = int(spec.get("parallelism", 1))
        return min(parallelism, int(spec.get("completions", parallelism)))
    return 0


def complete(workloads: Sequence[Workload]) -> Callable[[Snapshot], bool]:
    """A test of a snapshot: has every workload made all the pods it will make?"""
    checks = [c for c in (_check(w) for w in workloads) if c is not None]
    return lambda snapshot: all(check(snapshot) for check in checks)


def _check(workload: Workload) -> Callable[[Snapshot], bool] | None:
    if workload.kind == "StatefulSet" and workload.spec.get("podManagementPolicy") != "Parallel":
        return lambda snapshot: ordered_complete(workload, snapshot)
    if workload.kind == "DaemonSet":
        return lambda snapshot: daemons_complete(workload, snapshot)
    return None


def _pods_named(workload: Workload, snapshot: Snapshot) -> dict[str, dict]:
    return {p["metadata"]["name"]: p for p in snapshot.pods.values() if p["metadata"]["namespace"] == workload.namespace}


def ordered_complete(workload: Workload, snapshot: Snapshot) -> bool:
    """All ordinals exist, or the newest is refused or gated (OrderedReady then waits for ever)."""
    pods = _pods_named(workload, snapshot)
    replicas = int(workload.spec.get("replicas", 1))
    present = [i for i in range(replicas) if f"{workload.name}-{i}" in pods]
    if len(present) == replicas:
        return True
    if not present:
        return False
    return snapshot.verdict(pods[f"{workload.name}-{max(present)}"]) in ("unschedulable", "gated")


def daemons_complete(workload: Workload, snapshot: Snapshot) -> bool:
    """The controller has counted the nodes (status of this generation) and made a pod for each."""
    current = snapshot.objects.get(("DaemonSet", workload.namespace, workload.name))
    if current is None:
        return False
    status = current.get("status") or {}
    if status.get("observedGeneration", 0) < current["metadata"].get("generation", 1):
        return False
    owned = [p for p in snapshot.pods.values()
             if any(r.get("uid") == current["metadata"]["uid"] for r in p["metadata"].get("ownerReferences") or [])]
    return len(owned) >= int(status.get("desiredNumberScheduled", 0))


def notes(workloads: Sequence[Workload], snapshot: Snapshot) -> list[str]:
    """What the report should say about workloads that made fewer pods than asked, and why."""
    said = []
    for workload in workloads:
        if workload.kind == "Job" and workload.spec.get("suspend"):
            said.append(f"Job {workload.namespace}/{workload.name} is suspended (spec.suspend: true), so it makes no pods; "
                        "a queueing controller such as Kueue unsuspends it once admitted, and none runs on the bed")
        if workload.kind == "StatefulSet" and workload.spec.get("podManagementPolicy") != "Parallel":
            pods = _pods_named(workload, snapshot)
            replicas = int(workload.spec.get("replicas", 1))
            made = sum(f"{workload.name}-{i}" in pods for i in range(replicas))
            if 0 < made < replicas:
                said.append(f"StatefulSet {workload.namespace}/{workload.name}: {made} of {replicas} pods made; with "
                            f"podManagementPolicy OrderedReady pod {made} is made only once pod {made - 1} runs")
    return said
