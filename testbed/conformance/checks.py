"""The conformance checks as data: what each requires, where that comes from, where it runs, what bites it.

A check's `faults` are the fault switches of our driver (fake_gpus/driver/faults.py) under which the
check must fail; the fault matrix (`faultmatrix.py`) is generated from this table, and a meta-test
runs the suite under each switch and asserts that exactly the checks naming it fail. A fault may
break several promises at once (a node published elsewhere is also a node not published); each such
extra tie carries a comment saying why.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterable

from fake_gpus.driver.faults import UNDERDECLARED as _UNDERDECLARED_SWITCHES

MUST, SHOULD = "MUST", "SHOULD"
PROFILES = ("gpu", "mig", "dynamic-mig", "shares")
KWOK, KIND, EXISTING = "kwok", "kind", "existing"
API_SIDE = (KWOK, KIND, EXISTING)
NODE_SIDE = (KIND, EXISTING)

# Sources, spelled once.
KEP_4381 = "KEP-4381 structured parameters (ResourceSlice pools, generation, resourceSliceCount)"
VALIDATION = "k8s.io/kubernetes pkg/apis/resource/validation (limits of the served resource.k8s.io version)"
KEP_4815 = "KEP-4815 partitionable devices (sharedCounters, consumesCounters)"
KEP_4816 = "KEP-4816 prioritized list (firstAvailable)"
E2E_DRA = "kubernetes test/e2e/dra"
NVIDIA_NAMES = "NVIDIA dra-driver-nvidia-gpu published names (DeviceClasses, attributes, capacities)"
NVIDIA_MIG = "NVIDIA MIG user guide: supported MIG profiles"
CNCF = "CNCF AI conformance: accelerators/dra_support"
KEP_5075 = "KEP-5075 consumable capacity (allowMultipleAllocations, capacity requestPolicy, consumedCapacity)"
NVIDIA_SHARES = "NVIDIA dra-driver-nvidia-gpu --consumable-shares (docs/design/sharing.md)"
NVIDIA_HEALTH = "NVIDIA dra-driver-nvidia-gpu NVMLDeviceHealthCheck device taints (docs/design/health.md)"
KEP_5055 = "KEP-5055 DRA device taints and tolerations"
# A shareable device with an invalid request policy (no allowMultipleAllocations, a maximum above the capacity, a
# step that does not divide the range) is refused by the API server with its whole slice: every such switch leaves
# the sharing node without slices, which served-api, shares.published and sched.shared-capacity all see.
SHARES_REFUSED = ("shares-not-multiple", "shares-exceed-device", "shares-step-not-divisor")
LIFECYCLE = ("prepare-fails", "prepare-hangs")  # a driver that never prepares: every pod-starting check fails
# One MIG profile under-declaring its memory slices (fake_gpus/driver/faults.py UNDERDECLARED): every such switch
# is tied, so the default KWOK fleet (clusters/conformance/kwok-gpu-fleet.yaml) has a partitionable GPU of each
# switch's board (an H100 and an H200); a switch of a board it lacks would fail nothing and break the matrix.
UNDERDECLARED = tuple(sorted(_UNDERDECLARED_SWITCHES))


@dataclass(frozen=True)
class Check:
    """One requirement a DRA GPU driver must (or should) meet, as observed through the API or NVML in a pod."""

    id: str
    level: str
    requirement: str
    sources: tuple[str, ...]
    backends: tuple[str, ...]
    profiles: tuple[str, ...]
    faults: tuple[str, ...]  # our driver's switches under which this check must fail
    needs: tuple[str, ...] = ()  # subject capabilities beyond the API (subject.py): "restart-driver", "node-control", ...


CHECKS: tuple[Check, ...] = (
    # --------------------------------------------------------------------- slices
    # wrong-node: the static-MIG node's own pool is missing; SHARES_REFUSED: the sharing node's slices are refused
    Check("slices.served-api", MUST,
          "Every node the driver serves has ResourceSlices, accepted by the served resource.k8s.io version and within its limits.",
          (VALIDATION, CNCF), API_SIDE, PROFILES, ("oversized-attribute", "wrong-node", *SHARES_REFUSED)),
    Check("slices.pools-consistent", MUST,
          "Each pool's newest generation holds exactly resourceSliceCount slices, all agreeing on that count, with unique device names.",
          (KEP_4381,), API_SIDE, PROFILES, ("pool-count-wrong",)),
    # parent-uuid-unstable: MIG devices name parents that are no GPU of their node. Not wrong-node: since
    # the driver writes with per-node credentials, the bed's ValidatingAdmissionPolicy denies a slice that
    # names another node, so that fault shows as a node without slices (served-api), never as a misplaced one.
    Check("slices.node-local", MUST,
          "Node-local slices name an existing node, and each node's devices are published on that node.",
          (KEP_4381, E2E_DRA), API_SIDE, PROFILES, ("parent-uuid-unstable",)),
    Check("slices.removed-with-node", MUST,
          "A GPU node that joins gets its slices, and its slices are removed when the node is deleted.",
          (KEP_4381, E2E_DRA), (KWOK,), ("gpu",), ("slices-outlive-node",), ("node-control",)),
    # oversized-attribute, wrong-node, SHARES_REFUSED: our publisher does not come back when a pool cannot be written or found
    Check("slices.stable-restart", SHOULD,
          "A driver restart with nothing changed keeps every slice's name, pool generation and content.",
          (KEP_4381, E2E_DRA), (KWOK, KIND), PROFILES, ("restart-churn", "oversized-attribute", "wrong-node", *SHARES_REFUSED),
          ("restart-driver",)),
    Check("partitions.within-counter-set", MUST,
          "Every device consumes only counters of a counter set in its pool, within its values, and a MIG device exactly its profile's memory slices.",
          (KEP_4815, NVIDIA_MIG), API_SIDE, ("dynamic-mig",), ("short-placement", *UNDERDECLARED)),
    Check("partitions.full-device-consumes-all", MUST,
          "The full-GPU device of each counter set consumes every counter of that set, all of it.",
          (KEP_4815,), API_SIDE, ("dynamic-mig",), ("oversized-counters",)),
    # --------------------------------------------------------------------- shared devices (consumable capacity)
    Check("shares.published", MUST,
          "Every node that is to share its devices publishes them shareable (allowMultipleAllocations, request policies the API server accepts).",
          (KEP_5075, VALIDATION, NVIDIA_SHARES), API_SIDE, ("shares",), SHARES_REFUSED),
    # wrong-memory: the shared GPU publishes twice its memory, so a third claim fits where the real memory is spent
    Check("sched.shared-capacity", MUST,
          "Two claims asking memory of one shared device both get it, a third that would overcommit its real memory waits, and gets it once one is freed.",
          (KEP_5075, NVIDIA_SHARES), API_SIDE, ("shares",), ("wrong-memory", *SHARES_REFUSED)),
    # Prepare through the stand-in kubelet, NVML read on the node: KWOK beds of the suite's own. A driver that never
    # prepares (LIFECYCLE) fails it too; those switches stay tied to the node-side checks only, so that the KWOK
    # matrix needs no rows of theirs.
    Check("node.time-slicing", MUST,
          "A claim configured with NVIDIA's GpuConfig TimeSlicing (interval Long) is prepared with its GPU's time slice set to Long in NVML, or refused at prepare by a driver not offering it (then not-run).",
          (NVIDIA_SHARES,), (KWOK,), ("shares",), ("sharing-ignored",), ("node-nvml",)),
    # --------------------------------------------------------------------- NVIDIA names
    Check("names.device-classes", MUST,
          "DeviceClasses gpu.nvidia.com and mig.nvidia.com exist and select only whole GPUs and only MIG devices.",
          (NVIDIA_NAMES,), API_SIDE, ("gpu", "mig"), ("class-selects-all",)),
    Check("names.attributes", MUST,
          "Devices carry NVIDIA's attribute and capacity names with NVIDIA's value types.",
          (NVIDIA_NAMES,), API_SIDE, PROFILES, ("renamed-attribute",)),
    Check("names.mig-profiles", MUST,
          "MIG devices name their profile as NVIDIA's tables do for the product, with that profile's memory and multiprocessors.",
          (NVIDIA_MIG, NVIDIA_NAMES), API_SIDE, ("mig", "dynamic-mig"), ("mig-profile-names",)),
    Check("names.gpu-memory", MUST,
          "A whole GPU's memory capacity is its product's memory as NVML reports it for that product.",
          (NVIDIA_NAMES,), API_SIDE, ("gpu",), ("wrong-memory",)),
    # --------------------------------------------------------------------- scheduling on the driver's slices
    Check("sched.exact", MUST,
          "Exactly claims for one and for two GPUs by product and memory get matching devices of the requested node; too many stay pending.",
          (E2E_DRA, CNCF), API_SIDE, ("gpu",), ("wrong-memory",)),
    Check("sched.first-available", MUST,
          "A firstAvailable claim gets its first subrequest that the node can satisfy.",
          (KEP_4816, E2E_DRA), API_SIDE, ("gpu",), ("wrong-memory",)),
    Check("sched.all", MUST,
          "A claim with allocationMode All gets every matching device of the node.",
          (KEP_4381, E2E_DRA), API_SIDE, ("gpu",), ("pool-count-wrong",)),
    Check("sched.match-attribute", MUST,
          "Two MIG requests constrained by matchAttribute parentUUID land on one GPU.",
          (KEP_4381, E2E_DRA), API_SIDE, ("dynamic-mig",), ("parent-uuid-unstable",)),
    # parent-uuid-unstable: no partition names its GPU as parent, so none can be asked for on that GPU
    Check("sched.partitions", MUST,
          "A partition consumes its share of the GPU: the full GPU and conflicting partitions wait, and get it once the partition is freed.",
          (KEP_4815, E2E_DRA), API_SIDE, ("dynamic-mig",), ("oversized-counters", "parent-uuid-unstable")),
    # pool-count-wrong: the scheduler leaves incomplete pools alone where the model does not;
    # renamed-attribute: "a GPU but not <board>" by architecture gets that board where the attribute is missing;
    # the under-declared profiles: the overlap sweep gets two partitions on one memory slice
    Check("sched.generated", MUST,
          "Generated workloads on the driver's slices allocate as the reference model says: sound, complete, fallback in order, freed on departure.",
          (KEP_4381, KEP_4815, KEP_4816), API_SIDE, PROFILES,
          ("short-placement", "oversized-counters", "class-selects-all", "pool-count-wrong", "renamed-attribute", "wrong-memory",
           *UNDERDECLARED)),
    # --------------------------------------------------------------------- GPU health (faults through the node's NVML)
    # After sched.generated, whose reference model knows no taints; in this order, on one node (health_checks.py).
    Check("health.fatal-xid-taints", MUST,
          "A fatal Xid (79) on a GPU of a node with health checks taints its device <driver>/xid=79 NoSchedule within 10 s, and a new claim for it is not allocated.",
          (NVIDIA_HEALTH, KEP_5055), (KWOK,), ("gpu",), ("taint-never-published", "taint-wrong-effect"), ("node-nvml",)),
    Check("health.lost-gpu", MUST,
          "A GPU fallen off the bus taints its device <driver>/gpu-lost NoSchedule within 10 s.",
          (NVIDIA_HEALTH, KEP_5055), (KWOK,), ("gpu",), ("taint-never-published", "taint-wrong-effect"), ("node-nvml",)),
    # taint-never-published, taint-wrong-effect: no gpu-lost NoSchedule taint appears, so there is nothing to heal.
    # NVIDIA's driver fails it (it lifts no taint until it restarts): SHOULD.
    Check("health.heal", SHOULD,
          "Once a lost GPU (tainted gpu-lost NoSchedule) is back its gpu-lost taint is lifted within 15 s and a new claim for it is allocated.",
          (KEP_5055,), (KWOK,), ("gpu",), ("taint-never-removed", "taint-never-published", "taint-wrong-effect"), ("node-nvml",)),
    Check("health.ignored-xid", MUST,
          "An application Xid (13), which NVIDIA's driver ignores, never taints its device NoSchedule.",
          (NVIDIA_HEALTH,), (KWOK,), ("gpu",), ("ignored-xids-wrong",), ("node-nvml",)),
    # --------------------------------------------------------------------- the hardware after prepare (KWOK: NVML is local)
    # Last of the KWOK checks: it has our driver's plugin join the stand-in kubelet on a dynamic-MIG node, which the
    # scheduling checks before it use without any prepare. unprepare-leaks: the probe's instances outlive their claims.
    Check("node.nvml-state", MUST,
          "Each node's NVML state is what its prepared claims say and nothing more: a prepared MIG device is an instance "
          "of its profile at its allocated placement, gone once unprepared; compute mode and time slice as their GpuConfig asks.",
          (KEP_4815, NVIDIA_MIG, NVIDIA_SHARES), (KWOK,), ("dynamic-mig",), ("nvml-chooses-placement", "unprepare-leaks"),
          ("node-nvml",)),
    # --------------------------------------------------------------------- node side (kubelet plugin)
    # Every node-side check starts pods: a driver that never prepares (prepare-fails, prepare-hangs) fails
    # them all, so those two faults are tied to each (LIFECYCLE).
    # cdi-wrong-device: the dynamic MIG device's pod sees its parent GPU whole, so no MIG device to compare
    Check("slices.nvml-agree", MUST,
          "Each allocated device's published uuid, productName, memory, cudaComputeCapability (GPUs) and parentUUID, profile, memory (MIG devices) agree with NVML in the pod holding it.",
          (NVIDIA_NAMES, E2E_DRA), NODE_SIDE, PROFILES,
          ("wrong-memory", "parent-uuid-unstable", "mig-profile-names", "cdi-wrong-device", *LIFECYCLE), ("workload-image",)),
    Check("node.prepare-unprepare", MUST,
          "A pod with a claim starts once the claim is prepared, and its devices are unprepared when it is gone.",
          (E2E_DRA, CNCF), NODE_SIDE, PROFILES, ("unprepare-leaks", *LIFECYCLE), ("workload-image",)),
    Check("node.container-sees-its-devices", MUST,
          "A container sees through NVML exactly the devices allocated to its claim: those whole GPUs, that many MIG devices.",
          (E2E_DRA, NVIDIA_NAMES), NODE_SIDE, PROFILES, ("cdi-wrong-device", "cdi-all-devices", *LIFECYCLE), ("workload-image",)),
    Check("node.several-claims-containers", MUST,
          "In a pod with two claims and three containers (one claim each, both), each container sees exactly its claims' devices.",
          (E2E_DRA,), NODE_SIDE, ("gpu",), ("cdi-wrong-device", "cdi-all-devices", *LIFECYCLE), ("workload-image",)),
    Check("node.shared-claim", MUST,
          "Two pods sharing one claim both run and see exactly the claim's device.",
          (E2E_DRA,), NODE_SIDE, ("gpu",), ("cdi-wrong-device", "cdi-all-devices", *LIFECYCLE), ("workload-image",)),
    Check("node.init-containers", MUST,
          "An init container and the main container using one claim both see exactly its device.",
          (E2E_DRA,), NODE_SIDE, ("gpu",), ("cdi-wrong-device", "cdi-all-devices", *LIFECYCLE), ("workload-image",)),
    Check("node.force-delete-unprepare", MUST,
          "A force-deleted pod's claim is unprepared: a monitoring pod (MIG monitor capability) holding every GPU of the node afterwards sees no MIG device left.",
          (E2E_DRA,), NODE_SIDE, ("dynamic-mig",), ("unprepare-leaks", *LIFECYCLE), ("workload-image",)),
    Check("node.prepare-retried", MUST,
          "A prepare that failed (the driver was off the node) is retried and the pod starts once the driver is back.",
          (E2E_DRA,), NODE_SIDE, PROFILES, LIFECYCLE, ("workload-image", "pause-driver")),
    # The generated workloads with the node side judged after every step (node_watch.py). Its explicit opening
    # shows each tied fault whatever is drawn later: parent-uuid-unstable and mig-profile-names, a MIG device whose
    # published parent or profile is not what NVML shows; admin-access-refused, the opening's admin-access pod
    # beside a pod holding a GPU of that node; unprepare-leaks, the opening MIG pod's instance outliving it.
    Check("node.generated", MUST,
          "Generated workloads on real kubelets: after every step each running pod's containers see through NVML exactly their "
          "claims' devices, each partitionable node's MIG devices are exactly the partitions allocated to running pods, "
          "and nothing stays prepared for a pod that is gone.",
          (KEP_4381, KEP_4815, E2E_DRA), NODE_SIDE, PROFILES,
          ("unprepare-leaks", "cdi-wrong-device", "cdi-all-devices", "parent-uuid-unstable", "mig-profile-names",
           "admin-access-refused", *LIFECYCLE), ("workload-image", "node-monitor")),
    # cdi-wrong-device, cdi-all-devices: the admin pod sees other devices than the one it was given
    Check("node.admin-access", SHOULD,
          "A device held by a pod is also given to an admin-access claim (in a namespace labelled for it), whose pod runs and sees exactly it.",
          ("KEP-5018 DRA admin access", E2E_DRA), NODE_SIDE, ("gpu",),
          ("admin-access-refused", "cdi-wrong-device", "cdi-all-devices", *LIFECYCLE), ("workload-image",)),
    # The disruptive checks run last (as Kubernetes e2e keeps its [Disruptive] tests apart): they restart the
    # driver, and a driver whose restart leaks (checkpoint-lost) leaves MIG instances behind that a later
    # check would find on the node and report as its own.
    Check("node.plugin-restart", MUST,
          "A restart of the driver's pods with a claim prepared keeps the pod running with its device, prepares new claims, and unprepares the old one later.",
          (E2E_DRA,), NODE_SIDE, ("dynamic-mig",), ("checkpoint-lost", "unprepare-leaks", *LIFECYCLE), ("workload-image", "restart-driver")),
    Check("node.rolling-update", MUST,
          "A rolling update of the driver's DaemonSets with a claim prepared keeps the pod running with its device, prepares new claims, and unprepares the old one later.",
          (E2E_DRA,), NODE_SIDE, ("dynamic-mig",), ("checkpoint-lost", "unprepare-leaks", *LIFECYCLE), ("workload-image", "roll-driver")),
)

BY_ID = {c.id: c for c in CHECKS}


def select(profile: str) -> list[Check]:
    """The checks of a profile (`all`: every check), in table order."""
    if profile == "all":
        return list(CHECKS)
    if profile not in PROFILES:
        raise ValueError(f"unknown profile {profile!r}; valid: {', '.join(PROFILES)}, all")
    return [c for c in CHECKS if profile in c.profiles]


def faults_of(checks: Iterable[Check]) -> list[str]:
    """Every fault some check of `checks` is tied to, sorted."""
    return sorted({f for c in checks for f in c.faults})
