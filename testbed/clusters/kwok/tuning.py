"""Control-plane settings for large KWOK fleets (`--allow-large`): what a user running thousands of DRA
nodes would set on a stock control plane, measured by benchmarks/publish_scale.py.

Where the memory goes (apiserver heap profile, 200 nodes x 8 H100 in dynamic MIG, 41,600 devices): each
decoded copy of every ResourceSlice costs about 3.4 KB per device (every device carries a dozen attributes
and a map of counter consumptions of resource.Quantity), and the apiserver held two of them: its watch
cache (half its heap) and the Node authorizer's informer (the graph needs only each slice's node name, but
the informer keeps whole objects). The scheduler holds one more, the controller-manager's device-taint
controller another, and its garbage collector one more (it watches every resource through the typed
informers where there are any, so whole slices, not their metadata). Go's default GOGC=100 lets each
process's heap grow to twice what is live, unless a memory limit stops it sooner.
"""

from __future__ import annotations

import os
from typing import Mapping

from testbed.clusters.features import as_flag

# The slices' watch cache off: lists and watches of slices go to etcd. The scheduler and the
# controller-manager each decode their watch events themselves (a little CPU) instead of sharing one decoded copy
# that stays resident for the life of the apiserver.
APISERVER_ARGS = {"watch-cache-sizes": "resourceslices.resource.k8s.io#0"}
# Authorization by RBAC alone: the Node authorizer is for kubelets' own credentials, and KWOK nodes run no
# kubelet (our driver's per-node tokens are a service account's, held to their node by the admission
# policy, not by the Node authorizer). Its graph keeps an informer copy of every ResourceSlice (3.7 KB per
# device: 154 of the apiserver's 317 MB at 200 nodes x 8 H100 in dynamic MIG). kwokctl sets the flag
# itself, so this one replaces its value rather than adding a second.
APISERVER_OVERRIDES = {"authorization-mode": "RBAC"}
# The device-taint eviction controller keeps its own informer copy of every slice; a fleet of thousands of
# nodes is for scheduling at scale, device-taint eviction is tested on small beds.
CONTROLLER_MANAGER_ARGS = {"controllers": "*,-device-taint-eviction-controller"}
# The two components that hold every slice get a soft memory limit (GOMEMLIMIT) each, as a share of the
# machine's memory: far below it GOGC decides, near it the collector runs sooner, so the heap's growth
# stops where the machine would run out instead of at GOGC's multiple of what is live. Too low a limit costs
# CPU, never an out-of-memory kill; the runtime caps its collector at half the CPU.
# The controller-manager also collects at GOGC=50 (heap near 1.5x live, not 2x): at 5,000 nodes x 8 H100 in
# dynamic MIG, at Go's default it outgrew its limit (peak 5,148 MiB against 4,821) and the fleet's peak RSS
# sum came to 15.4 GiB of the 16 allowed. At 17% of 24 GiB (4.0 GiB) it spent a third of a core collecting
# even at GOGC=50 and slowed the publish; 20% leaves it room.
# The scheduler keeps Go's default: GOGC=50 cost it a fifth more CPU per pod on a 625-node bed of whole
# GPUs, where its heap is a few hundred MB (benchmarks/sched_throughput.py, the same bed in turn: 29.3 and
# 32.2 pods/s at GOGC=50, 36.0 and 36.4 without), and at 5,000 nodes its heap stayed below its limit.
# The apiserver holds no slice with the settings above (no watch cache of them, no Node authorizer graph):
# its heap is the requests in flight, and it keeps Go's defaults.
GOGC = {"kube-controller-manager": "50"}
GO_COMPONENTS = ("kube-scheduler", "kube-controller-manager")
PATCHED_COMPONENTS = ("kube-apiserver", *GO_COMPONENTS)
# Live at 1,000 nodes x 8 H100 in dynamic MIG after 100 MIG pods: scheduler 1,152 MB (its slices, plus the
# allocator's per-cycle conversion of every slice), controller-manager 641 MB (its slices).
MEMORY_SHARES = {"kube-scheduler": 0.30, "kube-controller-manager": 0.20}
# With DRADeviceTaints on, the scheduler's slice tracker indexes every device by driver, pool and name (a set
# of strings per device: 125 of the scheduler's 1,152 MB live above). A production 1.34 or 1.35 scheduler runs
# with the gate off (alpha), and so does a large fleet's; the API keeps it, device taints are tested on small
# beds (the controller-manager's taint controller is off above for the same reason).
# DRADeviceTaintRules (1.35+) depends on it: a 1.35 or 1.36 scheduler given the rules' gate without the taints'
# exits at start ("depends on features that are disabled"), so both go where the bed switched them on.
SCHEDULER_GATES_OFF = ("DRADeviceTaints", "DRADeviceTaintRules")


def machine_memory() -> int:
    """The machine's memory in bytes (MemTotal)."""
    with open("/proc/meminfo") as meminfo:
        for line in meminfo:
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def component_patches(large: bool, gates: Mapping[str, bool] | None = None,
                      memory: int | None = None) -> dict[str, dict[str, dict[str, str]]]:
    """Per kwokctl component: extra args, args replacing kwokctl's own ("overrides") and environment
    variables; nothing unless `large`. `gates`: the feature gates every component gets (the scheduler's
    are these with SCHEDULER_GATES_OFF off); `memory`: the machine's, in bytes (default: this one's)."""
    if not large:
        return {}
    memory = machine_memory() if memory is None else memory
    patches: dict[str, dict[str, dict[str, str]]] = {c: {"args": {}, "overrides": {}, "envs": {}} for c in PATCHED_COMPONENTS}
    for component in GO_COMPONENTS:
        patches[component]["envs"].update(GOMEMLIMIT=f"{int(memory * MEMORY_SHARES[component]) >> 20}MiB")
        if component in GOGC:
            patches[component]["envs"]["GOGC"] = GOGC[component]
    patches["kube-apiserver"]["args"].update(APISERVER_ARGS)
    patches["kube-apiserver"]["overrides"].update(APISERVER_OVERRIDES)
    patches["kube-controller-manager"]["args"].update(CONTROLLER_MANAGER_ARGS)
    off = [gate for gate in SCHEDULER_GATES_OFF if (gates or {}).get(gate)]
    if off:
        scheduler_gates = dict(gates or {}, **{gate: False for gate in off})
        patches["kube-scheduler"]["overrides"]["feature-gates"] = as_flag(scheduler_gates)
    return patches
