"""Scheduler profiles of a density replay: `default` (kube-scheduler as shipped) and `packing`.

Which node a pod lands on is scored by plugins that cannot see DRA devices: NodeResourcesFit scores a node's
CPU and memory, and a pod that requests neither counts as 100m and 200 MB (the scheduler's non-zero
defaults), a rounding error on a KWOK node of 128 CPUs and 1 TiB (scores are whole percent). So under
`default` nodes tie on resources and the order is DynamicResources' score (1.35 and newer: a node where a
higher-ranked `firstAvailable` subrequest fits scores higher; none on 1.34) and then chance.

`packing` makes node scoring see each pod's GPU share: NodeResourcesFit with the MostAllocated strategy on
CPU, NodeResourcesBalancedAllocation off, and every pod requesting CPU in proportion to its share of GPUs
(CPU_PER_GPU millicores per GPU, so a node of the fleet's largest GPU count is full in CPU exactly when
the shares on it add up to its GPUs). A pod's devices never hold less than its share (a partition or a
capacity request rounds up), so the CPU request never refuses a node whose devices would take the pod; it
only ranks nodes fuller first. Within a node the allocator's first-fit over devices packs already.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from testbed.density.trace import TracePod

PROFILES = ("default", "packing")
NODE_CPU_MILLI = 128_000  # a KWOK GPU node's allocatable CPU (testbed/clusters/kwok/nodes.py)

PACKING_CONFIG = {
    "apiVersion": "kubescheduler.config.k8s.io/v1",
    "kind": "KubeSchedulerConfiguration",
    "leaderElection": {"leaderElect": False},  # one scheduler per bed, as kwokctl's flag says for the default
    "profiles": [{
        "schedulerName": "default-scheduler",
        "plugins": {"score": {"disabled": [{"name": "NodeResourcesBalancedAllocation"}]}},
        "pluginConfig": [{"name": "NodeResourcesFit", "args": {
            "scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": 1}]}}}],
    }],
}


def scheduler_config(profile: str, directory: Path) -> Path | None:
    """The KubeSchedulerConfiguration file of `profile` written in `directory`; None for the default."""
    if profile == "default":
        return None
    if profile != "packing":
        raise ValueError(f"scheduler profile {profile!r} is unknown; valid: {', '.join(PROFILES)}")
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scheduler-packing.yaml"
    path.write_text(yaml.safe_dump(PACKING_CONFIG, sort_keys=False))
    return path


def cpu_per_gpu(gpus_per_node: int) -> int:
    """Millicores a pod requests per GPU of share, for a fleet whose largest node has `gpus_per_node` GPUs."""
    return NODE_CPU_MILLI // gpus_per_node


def cpu_request(pod: TracePod, per_gpu: int) -> str:
    """The CPU request standing for `pod`'s GPU share (rounded down: never more than the share)."""
    return f"{pod.num_gpu * pod.gpu_milli * per_gpu // 1000}m"
