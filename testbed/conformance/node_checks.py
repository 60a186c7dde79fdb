"""Node-side checks on real kubelets: claims prepared and unprepared, what containers see through NVML.

The devices a pod holds come from the API (its claims' allocations and the slices they name); what it
sees comes from NVML inside its containers (workload_pods). A MIG instance left behind is found the
way a real node's monitoring pod finds it: privileged, with the MIG monitor capability (no_leftover_mig).
"""

from __future__ import annotations

import time
from typing import Callable

from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import get_board
from testbed.clusters.layout import NodeSpec
from testbed.conformance import workload_pods as wp
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.subject import Subject

LEFTOVER_TIMEOUT = 90.0  # the kubelet unprepares after the pod object is gone: allow it that long
ADMIN_LABEL = "resource.kubernetes.io/admin-access"
PRIVILEGED_NAMESPACE = {"pod-security.kubernetes.io/enforce": "privileged"}  # Pod Security admits the monitor pod


def _node(subject: Subject, mode: str, min_gpus: int = 1) -> NodeSpec:
    for node in subject.layout.nodes if subject.layout else ():
        if node.mode.kind == mode and node.count >= min_gpus:
            return node
    raise NotRun(f"the layout has no {mode} node with {min_gpus} or more GPUs")


def _nodes(subject: Subject) -> list[NodeSpec]:
    """One node per mode the layout has (whole, dynamic MIG, static MIG)."""
    found = {}
    for node in subject.layout.nodes if subject.layout else ():
        found.setdefault(node.mode.kind, node)
    if not found:
        raise NotRun("no layout: the suite does not know which nodes carry GPUs")
    return list(found.values())


def _typed(subject: Subject, kind: str) -> str:
    return f"device.attributes['{subject.driver}'].type == '{kind}'"


def _small_mig(subject: Subject, node: NodeSpec) -> str:
    """A MIG device of the board's smallest memory size (selected by capacity, not by profile name)."""
    board = get_board(node.board)
    mib = min(p.memory_mib for p in board.gpu_instance_profiles)
    return f"{_typed(subject, 'mig')} && device.capacity['{subject.driver}'].memory.compareTo(quantity('{mib}Mi')) <= 0"


def one_device(subject: Subject, node: NodeSpec) -> dict:
    """A claim spec for one device of the node's mode: a whole GPU, or its smallest MIG device."""
    if node.mode.kind == "whole":
        return wp.devices_spec(subject.gpu_class, _typed(subject, "gpu"))
    return wp.devices_spec(subject.mig_class, _small_mig(subject, node))


def _held(subject: Subject, namespace: str, pod: str, name: str = "gpu") -> list[dict]:
    return wp.allocated(subject, namespace, wp.claims_of(subject, namespace, pod)[name])


def no_leftover_mig(subject: Subject, node: NodeSpec, evidence: Evidence, after: str) -> None:
    """Once nothing else holds a GPU of the node, NVML must show no MIG device and no GPU instance on it
    (within LEFTOVER_TIMEOUT).

    The probe is what a real node's monitoring pod is: privileged, so it has the node's device nodes, the
    MIG monitor capability (nvidia-cap2, /proc/driver/nvidia/capabilities/mig/monitor) among them, and
    NVML shows it every MIG device and GPU instance of the GPUs it sees. A pod given only a GPU's device
    node sees none of them (their GPU- and compute-instance caps nodes are not its), so a leaked instance
    would be invisible to it. The probe holds every whole GPU of the node: the scheduler then agrees that
    no claim has a partition there, and any instance NVML shows is one nobody holds."""
    namespace = subject.namespace(PRIVILEGED_NAMESPACE)
    every_gpu = wp.devices_spec(subject.gpu_class, _typed(subject, "gpu"), all_devices=True)
    try:
        pod = wp.run(subject, namespace, wp.PodPlan(node.name, {"gpu": every_gpu}, privileged=True))
    except ApiException as exc:
        if exc.status != 403:
            raise
        raise NotRun(f"the cluster refuses a privileged pod on {node.name} ({exc.reason}); finding MIG instances "
                     f"left behind takes the MIG monitor capability, which only a privileged pod has") from None
    deadline = time.monotonic() + LEFTOVER_TIMEOUT
    while True:
        report = wp.view_now(subject, namespace, pod)
        _, migs = wp.seen(report)
        # a GPU instance without its compute instance is no MIG device, yet holds its slices
        instances = sum(len(d.get("gpu_instances") or []) for d in report.get("devices") or [])
        if not migs and not instances:
            break
        if time.monotonic() > deadline:
            evidence.write(f"leftover-{node.name}.json", report)
            raise CheckFailed(f"{after}, a monitoring pod holding every GPU of {node.name} still sees {sum(migs.values())} "
                              f"MIG device(s) and {instances} GPU instance(s) {LEFTOVER_TIMEOUT:.0f}s later: they were not unprepared")
        time.sleep(2)
    evidence.write(f"monitor-{node.name}.json", report)
    subject.drop_namespace(namespace)


def prepare_unprepare(subject: Subject, evidence: Evidence) -> None:
    for node in _nodes(subject):
        namespace = subject.namespace()
        pod = wp.run(subject, namespace, wp.PodPlan(node.name, {"gpu": one_device(subject, node)}))
        evidence.write(f"{node.name}-view.json", wp.view(subject, namespace, pod))
        wp.delete(subject, namespace, pod)
        subject.drop_namespace(namespace)
        if node.mode.kind == "dynamic-mig":
            no_leftover_mig(subject, node, evidence, "after its pod was deleted")


def container_sees_its_devices(subject: Subject, evidence: Evidence) -> None:
    for node in _nodes(subject):
        namespace = subject.namespace()
        pod = wp.run(subject, namespace, wp.PodPlan(node.name, {"gpu": one_device(subject, node)}))
        report, devices = wp.view(subject, namespace, pod), _held(subject, namespace, pod)
        evidence.write(f"{node.name}.json", {"allocated": devices, "seen": report})
        wp.sees_exactly(subject, report, devices, f"the container of a pod holding one device on {node.name}")
        subject.drop_namespace(namespace)


def several_claims_containers(subject: Subject, evidence: Evidence) -> None:
    node = _node(subject, "whole", 2)
    namespace = subject.namespace()
    one = wp.devices_spec(subject.gpu_class, _typed(subject, "gpu"))
    plan = wp.PodPlan(node.name, {"a": one, "b": one},
                      containers=[wp.Container("one", ["a"]), wp.Container("two", ["b"]), wp.Container("both", ["a", "b"])])
    pod = wp.run(subject, namespace, plan)
    held = {name: _held(subject, namespace, pod, name) for name in ("a", "b")}
    for container in plan.containers:
        devices = [d for c in container.claims for d in held[c]]
        report = wp.view(subject, namespace, pod, container.name)
        evidence.write(f"{container.name}.json", {"allocated": devices, "seen": report})
        wp.sees_exactly(subject, report, devices, f"container {container.name} (claims {', '.join(container.claims)})")


def shared_claim(subject: Subject, evidence: Evidence) -> None:
    node = _node(subject, "whole")
    namespace = subject.namespace()
    claim = wp.create_claim(subject, namespace, wp.devices_spec(subject.gpu_class, _typed(subject, "gpu")))
    pods = [wp.run(subject, namespace, wp.PodPlan(node.name, claims={"gpu": claim})) for _ in range(2)]
    devices = wp.allocated(subject, namespace, claim)
    for pod in pods:
        report = wp.view(subject, namespace, pod)
        evidence.write(f"{pod}.json", {"allocated": devices, "seen": report})
        wp.sees_exactly(subject, report, devices, f"pod {pod} sharing claim {claim}")


def init_containers(subject: Subject, evidence: Evidence) -> None:
    node = _node(subject, "whole")
    namespace = subject.namespace()
    plan = wp.PodPlan(node.name, {"gpu": one_device(subject, node)},
                      containers=[wp.Container("init", ["gpu"], init=True), wp.Container("main", ["gpu"])])
    pod = wp.run(subject, namespace, plan)
    devices = _held(subject, namespace, pod)
    for container in ("init", "main"):
        report = wp.view(subject, namespace, pod, container)
        evidence.write(f"{container}.json", {"allocated": devices, "seen": report})
        wp.sees_exactly(subject, report, devices, f"the {container} container")


def force_delete_unprepare(subject: Subject, evidence: Evidence) -> None:
    node = _node(subject, "dynamic-mig")
    namespace = subject.namespace()
    pod = wp.run(subject, namespace, wp.PodPlan(node.name, {"gpu": one_device(subject, node)}))
    evidence.write("held.json", _held(subject, namespace, pod))
    wp.delete(subject, namespace, pod, force=True)
    no_leftover_mig(subject, node, evidence, "after its pod was force-deleted")


# How long a kubelet may take to try a failed prepare again: not a sync error to back off from (10 s), since
# kuberuntime's SyncPod records the event and returns without failing its result, but the pod's next resync,
# every syncFrequency (1 min) with 0.5 jitter (pkg/kubelet/pod_workers.go): 60-90 s (73-78 s seen on kind).
KUBELET_RETRY = 90.0


def prepare_retried(subject: Subject, evidence: Evidence) -> None:
    """The driver is kept off the node while a pod is bound there (the kubelet's prepare fails), then
    comes back: the kubelet retries and the pod must start."""
    node = _node(subject, "whole")
    namespace = subject.namespace()
    with subject.pause_driver():
        pod = wp.start(subject, namespace, wp.PodPlan(node.name, {"gpu": one_device(subject, node)}))
        deadline = time.monotonic() + 60
        while not any(e.startswith("FailedPrepareDynamicResources") for e in wp.events(subject, namespace, pod)):
            if time.monotonic() > deadline:
                evidence.write("events.json", wp.events(subject, namespace, pod))
                raise NotRun("no failed prepare was seen while the driver was off the node; nothing to retry")
            time.sleep(1)
        evidence.write("events-while-paused.json", wp.events(subject, namespace, pod))
    wp.wait_running(subject, namespace, pod, timeout=wp.START_TIMEOUT + KUBELET_RETRY)
    evidence.write("events.json", wp.events(subject, namespace, pod))
    evidence.write("view.json", wp.view(subject, namespace, pod))


def _survives(subject: Subject, evidence: Evidence, how: Callable[[], None], what: str) -> None:
    """A pod holding a MIG device across `how`: it keeps running and seeing its device, a new pod is
    prepared, and both claims are unprepared afterwards (no MIG device left)."""
    node = _node(subject, "dynamic-mig")
    namespace = subject.namespace()
    spec = {"gpu": one_device(subject, node)}
    before = wp.run(subject, namespace, wp.PodPlan(node.name, spec))
    seen_before = wp.view(subject, namespace, before)
    how()
    pod = subject.core.read_namespaced_pod(before, namespace)
    restarts = sum(c.restart_count for c in pod.status.container_statuses or [])
    if pod.status.phase != "Running" or restarts:
        raise CheckFailed(f"pod {before} is {pod.status.phase} with {restarts} restart(s) after {what}")
    seen_after = wp.view_now(subject, namespace, before)
    evidence.write("running-pod.json", {"before": seen_before, "after": seen_after})
    if wp.seen(seen_after) != wp.seen(seen_before):
        raise CheckFailed(f"pod {before} saw {wp.seen(seen_before)} before {what} and {wp.seen(seen_after)} after")
    after = wp.run(subject, namespace, wp.PodPlan(node.name, spec))
    evidence.write("new-pod.json", wp.view(subject, namespace, after))
    for pod_name in (before, after):
        wp.delete(subject, namespace, pod_name)
    subject.drop_namespace(namespace)
    no_leftover_mig(subject, node, evidence, f"after {what} and deleting the pods")


def plugin_restart(subject: Subject, evidence: Evidence) -> None:
    _survives(subject, evidence, subject.restart_driver, "a restart of the driver's pods")


def rolling_update(subject: Subject, evidence: Evidence) -> None:
    _survives(subject, evidence, subject.roll_driver, "a rolling update of the driver")


def admin_access(subject: Subject, evidence: Evidence) -> None:
    """A device held by a pod is also given to an admin-access claim in a namespace labelled for it."""
    node = _node(subject, "whole")
    namespace = subject.namespace()
    holder = wp.run(subject, namespace, wp.PodPlan(node.name, {"gpu": one_device(subject, node)}))
    (device,) = _held(subject, namespace, holder)
    gpu_uuid = wp.attribute(subject, device, "uuid")
    admin = subject.namespace({ADMIN_LABEL: "true"})
    selector = f"{_typed(subject, 'gpu')} && device.attributes['{subject.driver}'].uuid == '{gpu_uuid}'"
    pod = wp.run(subject, admin, wp.PodPlan(node.name, {"gpu": wp.devices_spec(subject.gpu_class, selector, admin=True)}))
    devices = _held(subject, admin, pod)
    report = wp.view(subject, admin, pod)
    evidence.write("admin.json", {"held": device, "allocated": devices, "seen": report})
    if not all(d["adminAccess"] for d in devices):
        raise CheckFailed(f"the admin claim's allocation does not carry adminAccess: {devices}")
    wp.sees_exactly(subject, report, devices, "the admin-access pod")


def nvml_agrees(subject: Subject, evidence: Evidence) -> None:
    """Every device of a node (whole: all GPUs; static MIG: all instances; dynamic: its smallest MIG
    device) as NVML reports it in a pod holding it, against what the slice publishes."""
    from kubernetes.utils import parse_quantity

    problems = []
    for node in _nodes(subject):
        namespace = subject.namespace()
        if node.mode.kind == "whole":
            spec = wp.devices_spec(subject.gpu_class, _typed(subject, "gpu"), all_devices=True)
        elif node.mode.kind == "static-mig":
            spec = wp.devices_spec(subject.mig_class, _typed(subject, "mig"), all_devices=True)
        else:
            spec = one_device(subject, node)
        pod = wp.run(subject, namespace, wp.PodPlan(node.name, {"gpu": spec}))
        report, devices = wp.view(subject, namespace, pod), _held(subject, namespace, pod)
        evidence.write(f"{node.name}.json", {"allocated": devices, "seen": report})
        gpus = {d["uuid"]: d for d in report.get("devices") or []}
        migs = [(g, m) for g in gpus.values() for m in g.get("mig_devices") or []]
        for d in devices:
            where = f"{node.name} {d['name']}"
            memory = int(parse_quantity((d.get("capacity") or {}).get("memory", {}).get("value", "0")))
            if wp.attribute(subject, d, "type") != "mig":
                gpu = gpus.get(wp.attribute(subject, d, "uuid"))
                if gpu is None:
                    problems.append(f"{where}: NVML in the pod shows no GPU with uuid {wp.attribute(subject, d, 'uuid')}")
                    continue
                checks = {"productName": (wp.attribute(subject, d, "productName"), gpu["name"]), "memory": (memory, gpu["memory_total"])}
                capability = wp.attribute(subject, d, "cudaComputeCapability")
                if capability and gpu.get("cuda_compute_capability"):
                    checks["cudaComputeCapability"] = (tuple(int(x) for x in capability.split(".")[:2]), tuple(gpu["cuda_compute_capability"]))
            else:
                parent, uuid_ = wp.attribute(subject, d, "parentUUID"), wp.attribute(subject, d, "uuid")
                match = [(g, m) for g, m in migs if (m["uuid"] == uuid_ if uuid_ else g["uuid"] == parent)]
                if not match:
                    problems.append(f"{where}: NVML in the pod shows no MIG device {'with uuid ' + uuid_ if uuid_ else 'on GPU ' + str(parent)}")
                    continue
                g, m = match[0]
                checks = {"parentUUID": (parent, g["uuid"]), "profile": (wp.attribute(subject, d, "profile"), wp.mig_profile(m["name"])),
                          "memory": (memory, m["memory_total"])}
            problems += [f"{where}: {key} published {want!r}, NVML in the pod reports {got!r}" for key, (want, got) in checks.items() if want != got]
        subject.drop_namespace(namespace)
    if problems:
        evidence.write("problems.json", problems)
        raise CheckFailed(f"{problems[0]}" + (f" (and {len(problems) - 1} more, see evidence)" if len(problems) > 1 else ""))
