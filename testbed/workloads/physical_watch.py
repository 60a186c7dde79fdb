"""The NVML state of a bed's nodes against the claims their kubelets prepared (physical.py), read live.

Where a bed's node hardware is local (KWOK: every node's fake-NVML state directory under the cluster's
home, whichever driver serves it), `PhysicalCheck` reads it after a step: the GPU and compute instances
from the state directory, each GPU's compute mode and time slice through the fake NVML library (as a
node tool would see them), and the MPS control daemons the state lists (the stand-in kubelet runs their pods,
testbed/kubelet/mps_pods.py; not for a driver in physical.MPS_NOT_RUN). Which claims are prepared it learns as the kubelet tells it: the stand-in
kubelet marks a pod once its claims are prepared (testbed.kubelet.PREPARED_ANNOTATION) and records a
`FailedPrepareDynamicResources` event when a prepare is refused. It judges once every pod's prepare
has settled and NVML agrees, or when the bound runs out, whatever it sees then.
"""

from __future__ import annotations

import ctypes
import functools
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Mapping

from kubernetes import client

from fake_gpus.catalog import get_board
from fake_gpus.machine.provision import usable_layouts
from fake_gpus.node import LabelError, NodeHardware, hardware_from_labels
from fake_gpus.nvml.state import StateError, read_mps_daemons, validate_state_dir
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.daemon import FAILED_REASON
from testbed.workloads.model import PodSpec
from testbed.workloads.observe import ObservedClaim, observe_claims
from testbed.workloads.oracle import Violation
from testbed.workloads.physical import PHYSICAL, HeldClaim, Instance, MpsDaemon, NodeNvml, judge_node, known_leaks, off_layout
from testbed.workloads.properties import World

if TYPE_CHECKING:
    from fake_gpus.driver.nvml_adapter import NvmlLibrary

DEFAULT_BOUND = 60.0  # seconds for prepares to settle: a node's first claim starts its plugin (the stand-in's START_GRACE)
POLL = 0.5


def kwok_state_dirs(home: Path) -> Callable[[str], Path]:
    """Where a KWOK bed keeps each node's fake NVML (both drivers: testbed/drivers/nvidia/plugin.state_dir)."""
    return lambda node: Path(home) / "nvml" / node


def static_layout(hardware: NodeHardware) -> dict[int, int]:
    """A static-MIG node's layout as instances per GPU-instance profile id on every GPU (the catalog's)."""
    board = get_board(hardware.board)
    ids = {p.name: p.id for p in board.gpu_instance_profiles}
    return {ids[name]: count for name, count in usable_layouts(board).get(hardware.mode.mig_layout or "", {}).items()}


def read_nvml(state_dir: Path, mps: bool = True) -> NodeNvml:
    """A node's instances and MPS daemons (unless `mps` is False) from its state directory, its GPUs' settings
    through the fake library; StateError when the directory is missing or corrupt."""
    gpus, mig = validate_state_dir(state_dir)
    minor = {g.index: g.minor for g in gpus}
    with_ci = {(c.gpu, c.gi) for c in mig.compute_instances}
    made = {Instance(minor[g.gpu], g.profile_id, g.start, g.size): (g.gpu, g.id) in with_ci for g in mig.gpu_instances}
    daemons: dict[int, tuple[MpsDaemon, ...]] | None = None
    if mps:
        daemons = {}
        for d in read_mps_daemons(state_dir):
            daemons[minor[d.gpu]] = daemons.get(minor[d.gpu], ()) + (MpsDaemon(d.active_thread_percentage, d.pinned_mib, d.pid),)
    return NodeNvml(frozenset(i for i, ci in made.items() if ci), frozenset(i for i, ci in made.items() if not ci),
                    _settings(state_dir, {g.uuid: g.minor for g in gpus}), {g.minor: g.uuid for g in gpus}, daemons)


@functools.cache
def _fake_library() -> NvmlLibrary:
    """The fake NVML this process reads settings through, fixed for its life: the one pynvml already has if it is
    the fake, else the current build. pynvml is process-global, and a rebuild mid-run (someone edits the fake's
    sources: ensure_library's key changes) must not make a later step load a second library."""
    import pynvml

    from fake_gpus.driver.nvml_adapter import NvmlLibrary
    from fake_gpus.nvml.build import SONAME, ensure_library

    loaded = pynvml.nvmlLib
    if loaded is not None and hasattr(loaded, "fakeNvmlSetStateDir") and os.path.isabs(loaded._name):
        return NvmlLibrary(Path(loaded._name))
    return NvmlLibrary(ensure_library() / SONAME)


def _settings(state_dir: Path, minors: Mapping[str, int]) -> dict[int, tuple[int, int]]:
    import pynvml

    out = {}
    with _fake_library().session(state_dir):
        for uuid, minor in minors.items():
            handle = pynvml.nvmlDeviceGetHandleByUUID(uuid)
            value = ctypes.c_uint(0)
            if pynvml.nvmlLib.fakeNvmlDeviceGetTimeslice(handle, ctypes.byref(value)) != pynvml.NVML_SUCCESS:
                raise StateError(f"{state_dir}: the fake NVML gives no time slice for {uuid}")
            out[minor] = (pynvml.nvmlDeviceGetComputeMode(handle), value.value)
    return out


def held_claims(claims: list[ObservedClaim], pods: Mapping[str, object], failed: set[str]) -> dict[str, list[HeldClaim]]:
    """Allocated claims per node, each as its kubelet holds it; a claim reserved for a pod whose prepare is
    neither done nor refused yet is left out and reported in the second value (pod keys: namespace/name)."""
    out: dict[str, list[HeldClaim]] = {}
    for claim in claims:
        if not claim.results or claim.node is None:
            continue
        users = [pods[key] for name in claim.reserved_for if (key := f"{claim.namespace}/{name}") in pods
                 and pods[key].metadata.deletion_timestamp is None]
        prepared = any((p.metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true" for p in users)
        refused = not prepared and any(f"{p.metadata.namespace}/{p.metadata.name}" in failed for p in users)
        out.setdefault(claim.node, []).append(HeldClaim(claim.owner, claim.results, claim.config, prepared, refused))
    return out


def unsettled(claims: list[ObservedClaim], pods: Mapping[str, object], failed: set[str]) -> list[str]:
    """Pods (namespace/name) bound with claims whose prepare is neither done nor refused."""
    waiting = []
    for claim in claims:
        for name in claim.reserved_for if claim.results else ():
            pod = pods.get(key := f"{claim.namespace}/{name}")
            if pod is None or pod.metadata.deletion_timestamp is not None:
                continue
            if (pod.metadata.annotations or {}).get(PREPARED_ANNOTATION) != "true" and key not in failed:
                waiting.append(key)
    return sorted(set(waiting))


@dataclass
class PhysicalCheck:
    """A runner's node check (runner.NodeCheck): every node's NVML equals its prepared claims, within `bound`."""

    api: client.ApiClient
    state_dir: Callable[[str], Path]
    driver: str
    bound: float = DEFAULT_BOUND
    provisioned: dict[str, tuple[NodeHardware, frozenset[Instance]]] = field(default_factory=dict)
    leaks: tuple[str, ...] = ()  # the driver's known upstream leaks (physical.KNOWN_LEAKS): excused, counted
    # "physical-checks", "physical-ms" (time spent judging, waits for prepares included: the check's cost) and
    # "physical-known-leaks" (judgements that excused a known leak)
    stats: dict[str, int] = field(default_factory=dict)
    excusing: bool = False  # the last look excused a known leak
    mps: bool = True  # judge MPS control daemons (False for a driver whose daemons the bed cannot run: physical.MPS_NOT_RUN)

    def __post_init__(self) -> None:
        self.core = client.CoreV1Api(self.api)
        self.resource = client.ResourceV1Api(self.api)
        self.nodes()  # a static-MIG node's layout as the bed brought it up, before any step

    def nodes(self) -> dict[str, NodeHardware]:
        """The bed's GPU nodes with local hardware. A static-MIG node's instances are recorded as provisioned
        once its NVML holds its layout's (a mode switch or a new board is applied by the node's machine after its
        labels change: a baseline taken before that settles would hold the old mode's instances)."""
        found = {}
        for node in self.core.list_node().items:
            try:
                hardware = hardware_from_labels(node.metadata.labels)
            except LabelError:
                continue
            name = node.metadata.name
            if hardware is None or not self.state_dir(name).is_dir():
                continue
            found[name] = hardware
            known = self.provisioned.get(name)
            if hardware.mode.kind != "static-mig" or (known is not None and known[0] == hardware):
                continue
            try:
                observed = read_nvml(self.state_dir(name))
            except (OSError, StateError):
                continue
            if not off_layout(observed, static_layout(hardware)):
                self.provisioned[name] = (hardware, observed.instances)
            else:
                self.provisioned.pop(name, None)  # an earlier hardware's baseline no longer holds
        return found

    def __call__(self, world: World | None = None, specs: Mapping[str, PodSpec] | None = None) -> list[Violation]:  # noqa: ARG002
        """Wait until every prepare has settled and NVML agrees, up to the bound; the violations then."""
        began = time.monotonic()
        deadline = began + self.bound
        while True:
            problems, waiting = self.once()
            if (not problems and not waiting) or time.monotonic() > deadline:
                break
            time.sleep(POLL)
        self.stats["physical-checks"] = self.stats.get("physical-checks", 0) + 1
        self.stats["physical-known-leaks"] = self.stats.get("physical-known-leaks", 0) + int(self.excusing)
        self.stats["physical-ms"] = self.stats.get("physical-ms", 0) + int(1000 * (time.monotonic() - began))
        if waiting:
            problems.append(Violation(PHYSICAL, f"claims of pods {waiting} neither prepared nor refused within {self.bound:.0f}s",
                                      "prepared or refused", waiting))
        return problems

    def once(self) -> tuple[list[Violation], list[str]]:
        """The violations now, and the pods whose prepare is still under way."""
        claims = observe_claims(self.resource)
        pods = {f"{p.metadata.namespace}/{p.metadata.name}": p for p in self.core.list_pod_for_all_namespaces().items}
        events = self.core.list_event_for_all_namespaces(field_selector=f"reason={FAILED_REASON}").items
        failed = {f"{e.involved_object.namespace}/{e.involved_object.name}" for e in events if e.involved_object.kind == "Pod"}
        held = held_claims(claims, pods, failed)
        problems, self.excusing = [], False
        for node, hardware in sorted(self.nodes().items()):
            try:
                observed = read_nvml(self.state_dir(node), self.mps)
            except (OSError, StateError) as exc:
                problems.append(Violation(PHYSICAL, f"{node}: its NVML state cannot be read: {exc}"))
                continue
            sizes = {p.id: p.memory_slices for p in get_board(hardware.board).gpu_instance_profiles}
            known = self.provisioned.get(node)
            provisioned = known[1] if known is not None and known[0] == hardware else None
            layout = static_layout(hardware) if hardware.mode.kind == "static-mig" else None
            excused = known_leaks(observed, sizes, self.leaks)
            self.excusing = self.excusing or bool(excused)
            problems += judge_node(node, hardware.mode.kind, observed, held.get(node, []), sizes, self.driver, provisioned,
                                   excused, layout)
        return problems, unsettled(claims, pods, failed)
