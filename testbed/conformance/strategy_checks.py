"""A claim's sharing strategy is applied when it is prepared: NVIDIA's `GpuConfig` opaque configuration.

With `sharing: {strategy: TimeSlicing, timeSlicingConfig: {interval: Long}}` NVIDIA's plugin sets the GPU's time
slice as `nvidia-smi compute-policy --set-timeslice 3` does before the claim counts as prepared (DESIGN.md
section 8; docs/design/sharing.md). The check reads the setting back from the node's NVML, which only a bed
whose nodes' fake NVML lives on this machine offers (`node-nvml`: KWOK beds of the suite's own, where the
stand-in kubelet prepares claims and no container runs to read it from inside).

A driver may not offer time slicing at all: NVIDIA's refuses the config at prepare unless its alpha gate
TimeSlicingSettings is on, and its chart leaves it off (docs/design/sharing.md). A refusal says so loudly, so it
is `not-run` with the driver's message (never a pass: the MUST was not shown); what fails is a claim prepared
with the strategy left unapplied.
"""

from __future__ import annotations

import time


from fake_gpus.nvml.state import StateError, validate_state_dir
from testbed.conformance import probes
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.share_checks import NOT_APPLICABLE, promised, shareable
from testbed.conformance.subject import Subject
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.daemon import FAILED_REASON
from testbed.workloads.devices import Device, Inventory
from testbed.workloads.physical_watch import read_nvml

CONFIG_API = "resource.nvidia.com/v1beta1"
LONG = 3  # NVIDIA's TimeSliceInterval "Long", the value `nvidia-smi compute-policy --set-timeslice` takes
PREPARE_TIMEOUT = 90.0  # a node's first claim starts its plugin on the stand-in kubelet


def time_slicing_config(driver: str, interval: str = "Long") -> list[dict]:
    """A claim's device configuration asking every device of it to be time-sliced at `interval`."""
    return [{"opaque": {"driver": driver, "parameters": {"apiVersion": CONFIG_API, "kind": "GpuConfig",
                                                         "sharing": {"strategy": "TimeSlicing", "timeSlicingConfig": {"interval": interval}}}}}]


def _whole_gpu(subject: Subject, inventory: Inventory) -> Device:
    """A whole GPU (not partitionable) with a uuid on a sharing node of the layout (else on any of its nodes)."""
    promises = promised(subject)
    if not promises and not shareable(inventory):
        raise NotRun(NOT_APPLICABLE)
    expected = subject.expected_nodes()
    gpus = sorted((d for d in inventory.devices.values() if d.attribute("type") == "gpu" and d.attribute("uuid") and not d.consumes
                   and d.node in (promises or expected)), key=lambda d: (d.node, d.id.device))  # on a KWOK bed of the
    # suite's own only the sharing nodes' plugins join the stand-in kubelet (beds.kwok_bed)
    if not gpus:
        raise NotRun("no layout node publishes a whole GPU with a uuid")
    return gpus[0]


class Refused(CheckFailed):
    """The kubelet reported the driver's refusal to prepare the claim (its message)."""


def _prepared(subject: Subject, namespace: str, pod: str, what: str = "with a TimeSlicing GpuConfig") -> None:
    """Until the kubelet says the pod's claims are prepared; CheckFailed with its reason when it refused them
    (an event, which changes nothing on the pod: polled)."""
    deadline = time.monotonic() + PREPARE_TIMEOUT
    while time.monotonic() < deadline:
        refused = _refusals(subject, namespace)
        if refused:
            raise Refused(f"prepare of a claim {what} was refused: {refused[0]}")
        if (subject.core.read_namespaced_pod(pod, namespace).metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true":
            return
        time.sleep(0.5)
    raise CheckFailed(f"the claim of pod {pod} was not prepared within {PREPARE_TIMEOUT:.0f} s")


def _refusals(subject: Subject, namespace: str) -> list[str]:
    return [e.message or "" for e in subject.core.list_namespaced_event(namespace).items if e.reason == FAILED_REASON]


def time_slicing(subject: Subject, evidence: Evidence) -> None:
    if subject.node_nvml is None:
        raise NotRun("needs the nodes' NVML (a KWOK bed of the suite's own)")
    gpu = _whole_gpu(subject, Inventory.from_slices(subject.slices()))
    assert gpu.node is not None
    uuid = str(gpu.attribute("uuid"))
    state_dir = subject.node_nvml(gpu.node)
    request = probes.exactly("gpu", subject.gpu_class, f"device.attributes['{subject.driver}'].uuid == '{uuid}'")
    namespace = subject.namespace()
    seen: dict = {"device": f"{gpu.node}/{gpu.id.device}", "uuid": uuid}
    try:
        probe = probes.run(subject, namespace, [request], gpu.node, config=time_slicing_config(subject.driver))
        seen["probe"] = probe.as_dict()
        if not probe.scheduled:
            raise CheckFailed(f"a claim for GPU {uuid} on {gpu.node} with a TimeSlicing GpuConfig stays pending: {probe.message}")
        try:
            _prepared(subject, namespace, probe.pod)
        except Refused as exc:
            raise NotRun(f"not offered by the driver as deployed: {exc}") from None
        try:
            minors = {g.uuid: g.minor for g in validate_state_dir(state_dir)[0]}
            settings = read_nvml(state_dir).settings
        except StateError as exc:
            raise CheckFailed(f"node {gpu.node}'s NVML cannot be read: {exc}") from None
        compute_mode, time_slice = settings.get(minors.get(uuid, -1), (None, None))
        seen["nvml"] = {"compute mode": compute_mode, "time slice": time_slice}
        if time_slice != LONG:
            raise CheckFailed(f"after preparing a claim for GPU {uuid} on {gpu.node} with TimeSlicing interval Long, NVML shows "
                              f"time slice {time_slice} (Long is {LONG})")
    finally:
        evidence.write("time-slicing.json", seen)
        subject.drop_namespace(namespace)
