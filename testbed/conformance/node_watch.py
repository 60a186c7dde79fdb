"""The node side of generated workloads on real kubelets, judged after every step (check node.generated).

What is judged is read the way a node's own tools read it, never from the driver:
- each running pod's containers see through NVML exactly the devices their claims were allocated (each
  container's report at its start, from its log); a pod bound to a node must start (its claims prepared);
- each partitionable GPU node's MIG devices are exactly the partitions allocated to the pods running
  there, and no GPU instance is left without its compute instance. A monitoring pod per node lists them:
  privileged, with no claim, loading NVML from the node's driver root, as dcgm-exporter or `nvidia-smi`
  run on the node do;
- nothing stays prepared for a pod that is gone: the partitions of a departed pod disappear from that
  list within the time the kubelet takes to unprepare (LEFTOVER_TIMEOUT).
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Mapping

from kubernetes.client.exceptions import ApiException

from testbed.conformance import workload_pods as wp
from testbed.conformance.node_checks import LEFTOVER_TIMEOUT, PRIVILEGED_NAMESPACE
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.subject import Subject
from testbed.workloads.model import PodSpec
from testbed.workloads.observe import Snapshot
from testbed.workloads.oracle import Violation
from testbed.workloads.properties import World

ROOT_IN_MONITOR = "/driver-root"
# where a driver root keeps libnvidia-ml.so.1 (Debian/Ubuntu, then RHEL-like layouts)
LIBRARY_DIRS = ("usr/lib/x86_64-linux-gnu", "usr/lib64", "usr/lib")


def monitor_pod(subject: Subject, node: str) -> dict:
    """A pod on `node` that prints what NVML shows the whole node and stays up: privileged (every device node,
    the MIG monitor capability among them), the node's driver root mounted read-only for its NVML library."""
    library_path = ":".join(f"{ROOT_IN_MONITOR}/{d}" for d in LIBRARY_DIRS)
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"generateName": "node-monitor-"}, "spec": {
        "nodeSelector": {"kubernetes.io/hostname": node}, "terminationGracePeriodSeconds": 1,
        "tolerations": [{"operator": "Exists"}],
        "containers": [{"name": "main", "image": subject.workload_image, "imagePullPolicy": "IfNotPresent", "args": ["--sleep"],
                        "securityContext": {"privileged": True}, "env": [{"name": "LD_LIBRARY_PATH", "value": library_path}],
                        "volumeMounts": [{"name": "driver-root", "mountPath": ROOT_IN_MONITOR, "readOnly": True}]}],
        "volumes": [{"name": "driver-root", "hostPath": {"path": subject.driver_root, "type": "Directory"}}]}}


def allocated_partitions(snap: Snapshot, node: str, running: set[str]) -> tuple[Counter, Counter]:
    """MIG devices on `node` as (parent UUID, profile): those that must exist (allocated without admin access
    to a claim a running pod reserves) and those that may (every allocated one)."""
    must, may = Counter(), Counter()
    for claim in snap.allocated():
        seen = set()
        for result in claim.results:
            device = snap.inventory.devices.get(result.device)
            if device is None or device.node != node or device.attribute("type") != "mig" or result.device in seen:
                continue
            seen.add(result.device)  # one instance per device, whichever requests name it
            key = (device.attribute("parentUUID"), device.attribute("profile"))
            may[key] += 1
            if not result.admin and any(f"{claim.namespace}/{p}" in running for p in claim.reserved_for):
                must[key] += 1
    return must, may


def instance_problems(report: dict, must: Counter, may: Counter) -> list[str]:
    """What a monitoring view shows against the partitions that must and may exist: missing, extra, and GPU
    instances without a compute instance (they hold their slices, yet are no MIG device)."""
    if report.get("error"):
        return [f"NVML failed in the monitoring pod: {report['error']}"]
    shown = wp.mig_keys_seen(report)
    problems = []
    if must - shown:
        problems.append(f"partitions of running pods missing: {sorted((must - shown).elements())}")
    if shown - may:
        problems.append(f"MIG devices no allocation holds: {sorted((shown - may).elements())}")
    for gpu in report.get("devices") or []:
        bare = len(gpu.get("gpu_instances") or []) - len(gpu.get("mig_devices") or [])
        if bare > 0:
            problems.append(f"{bare} GPU instance(s) without a compute instance on {gpu['uuid']}")
    return problems


@dataclass
class NodeWatch:
    """The node check of one run: monitoring pods on `nodes` (partitionable GPU nodes) and the pods already judged."""

    subject: Subject
    evidence: Evidence
    nodes: list[str]
    start_timeout: float | None = None  # None: workload_pods.START_TIMEOUT when a pod is waited for
    leftover_timeout: float = LEFTOVER_TIMEOUT
    namespace: str | None = None
    monitors: dict[str, str] = field(default_factory=dict)  # node -> monitoring pod
    judged: set[str] = field(default_factory=set)  # namespace/pod whose containers' views were compared
    checks: int = 0
    # evidence of what was compared: per judged pod its node and each container's devices; per node the most
    # partitions seen at once
    pods: list[dict] = field(default_factory=list)
    busiest: dict[str, list] = field(default_factory=dict)
    occupancy: list[dict] = field(default_factory=list)  # per node check and watched node: MIG devices seen, allocated
    before: dict[str, list] = field(default_factory=dict)  # per watched node: MIG devices shown before the first step

    def __call__(self, world: World, specs: Mapping[str, PodSpec]) -> list[Violation]:
        """The node side after a step: the new pods run and see their devices, then every watched node's partitions."""
        self.checks += 1
        return self._pods(world, specs) or [v for node in self.nodes for v in self._partitions(world, node)]

    def _pods(self, world: World, specs: Mapping[str, PodSpec]) -> list[Violation]:
        problems = []
        for name, pod in sorted(world.pods.items()):
            key = f"{world.namespace}/{name}"
            if not pod.node or key in self.judged or name not in specs:
                continue
            started = time.monotonic()
            try:
                wp.wait_running(self.subject, world.namespace, name, self.start_timeout)
            except CheckFailed as exc:
                problems.append(Violation("node-prepare", f"pod {name} is bound to {pod.node} but did not start: {exc}"))
                continue
            self.judged.add(key)
            spec = specs[name]
            held = {}
            # from its binding seen to all containers ready: the claims' prepare, then the containers' start
            self.pods.append({"pod": key, "node": pod.node, "containers": held, "start_s": round(time.monotonic() - started, 2)})
            for i, names in enumerate(spec.containers or (tuple(c.name for c in spec.claims),)):
                devices = [d for n in names if n in pod.claims for d in wp.allocated(self.subject, world.namespace, pod.claims[n])]
                held[f"c{i}"] = [f"{d['pool']}/{d['name']}" for d in devices]
                report = wp.view(self.subject, world.namespace, name, f"c{i}")
                wrong = wp.view_mismatch(self.subject, report, devices)
                if wrong:
                    self.evidence.write(f"view-{name}-c{i}.json", {"allocated": devices, "seen": report})
                    problems.append(Violation("node-view", f"container c{i} of pod {name} on {pod.node} {wrong}"))
        return problems

    def _partitions(self, world: World, node: str) -> list[Violation]:
        """Polls until the node's MIG devices are within what is allocated (a departed pod's partition goes
        when the kubelet has unprepared it) or the leftover timeout runs out."""
        running = {f"{world.namespace}/{name}" for name in self.judged_in(world)}
        must, may = allocated_partitions(world.snapshot, node, running)
        monitor = self.monitors[node]
        deadline = time.monotonic() + self.leftover_timeout
        while True:
            report = wp.view_now(self.subject, self.namespace, monitor)
            problems = instance_problems(report, must, may)
            if not problems or time.monotonic() > deadline:
                break
            time.sleep(2)
        shown = sorted(wp.mig_keys_seen(report).elements())
        self.occupancy.append({"check": self.checks, "node": node, "seen": len(shown), "allocated": sum(must.values())})
        if not problems:
            if len(shown) >= len(self.busiest.get(node, [])):
                self.busiest[node] = shown
            return []
        self.evidence.write(f"monitor-{node}-{self.checks}.json", {"must": sorted(must.elements()), "may": sorted(may.elements()), "seen": report})
        if self.before.get(node):
            # still a failure (the node is not as a conformant driver leaves it), but a vendor should look first
            # at whatever ran before this check
            problems.append(f"before the first step the node already showed MIG devices {self.before[node]}: left by an "
                            f"earlier check or by something outside the suite")
        return [Violation("node-partitions", f"{node}: {'; '.join(problems)}", sorted(must.elements()), shown)]

    def judged_in(self, world: World) -> list[str]:
        """The namespace's pods that run (judged) and still exist."""
        return [name for name in world.pods if f"{world.namespace}/{name}" in self.judged]

    def start(self) -> None:
        """A running monitoring pod on every watched node. NotRun where the cluster refuses privileged pods."""
        self.namespace = self.subject.namespace(PRIVILEGED_NAMESPACE)
        for node in self.nodes:
            try:
                created = self.subject.core.create_namespaced_pod(self.namespace, monitor_pod(self.subject, node))
            except ApiException as exc:
                if exc.status != 403:
                    raise
                raise NotRun(f"the cluster refuses a privileged pod on {node} ({exc.reason}); listing a node's MIG devices "
                             f"takes the MIG monitor capability, which only a privileged pod has") from None
            self.monitors[node] = created.metadata.name
        for node, pod in self.monitors.items():
            wp.wait_running(self.subject, self.namespace, pod, self.start_timeout)
            self.before[node] = sorted(wp.mig_keys_seen(wp.view_now(self.subject, self.namespace, pod)).elements())

    def summary(self) -> dict:
        """What was compared, for the report: the pods judged and each watched node's busiest moment."""
        return {"pods": self.pods, "busiest": self.busiest, "checks": self.checks, "watched": self.nodes, "occupancy": self.occupancy}

    def close(self) -> None:
        if self.namespace is not None:
            self.subject.drop_namespace(self.namespace)
            self.namespace = None
            self.monitors.clear()
