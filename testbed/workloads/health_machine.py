"""The failing-GPU state machine: pods with GPU claims come and go while GPUs of `:health` nodes fail (a fatal
Xid, a lost GPU) and heal, and an admin drains a device with a NoExecute DeviceTaintRule, on a KWOK bed of ours.

The model knows a device is off-limits to new claims once its NoSchedule/NoExecute taint is observed in the slice
(or its rule is created); it records which claims held the device at that moment. After every step, besides the
Runner's soundness, completeness and liveness:
- taint-respected: no claim that did not hold an off-limits device at that moment is allocated on it;
- failure-taints: a fatal Xid or a lost GPU puts a NoSchedule taint on the GPU's device within TAINT_BOUND_S;
- running-pods-stay: a NoSchedule taint leaves every pod of ours where it was, with the same allocation;
- heal-untaints: after a heal the node's devices lose their health taints within TAINT_BOUND_S (then liveness
  says a pending pod that fits on the healed device gets it);
- noexecute-releases: a NoExecute rule evicts the pods on its device and their claims are released; the node
  check (testbed.workloads.physical_watch, where the bed has one) then says nothing prepared is left behind.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, precondition, rule

from fake_gpus.nvml import health, state
from testbed.kube.device_taint_rules import DeviceTaintRulesNotServed, create_rule, delete_rule, served_version
from testbed.kube.waiting import WaitTimeout, until
from testbed.workloads.devices import DeviceId, Inventory
from testbed.workloads.model import ClaimSpec, PodClaim, PodSpec, Request, SubRequest
from testbed.workloads.observe import Snapshot
from testbed.workloads.oracle import ModelTooLarge, Solution, Usage, Violation, feasible_nodes
from testbed.workloads.runner import Runner

TAINT_BOUND_S = 10.0  # publisher poll 1 s + monitor wait + API write (suites/health/test_health_taints_live.py)
OFF_LIMITS = ("NoSchedule", "NoExecute")  # effects that keep new claims off a device (our pods tolerate none)
FAILURES = (("xid", 79), ("lost", 0))  # fatal Xid 79 (fallen off the bus) and a lost GPU: both taint NoSchedule
HEALTH_KEYS = ("xid", "gpu-lost")  # key suffixes of the driver's health taints (fake_gpus/driver/health.py)
MAX_LIVE_PODS = 5
RULE_KEY = "dra-testbed.io/health-machine"


def slice_taints(runner: Runner) -> dict[DeviceId, list[tuple[str, str | None, str]]]:
    """Device -> its (key, value, effect) taints, as the slices publish them now."""
    found: dict[DeviceId, list[tuple[str, str | None, str]]] = {}
    for s in runner.resource.list_resource_slice().items:
        for d in s.spec.devices or ():
            found[DeviceId(s.spec.driver, s.spec.pool.name, d.name)] = [(t.key, t.value, t.effect) for t in d.taints or ()]
    return found


def off_limits_taints(taints: list[tuple[str, str | None, str]], driver: str) -> list[tuple[str, str | None, str]]:
    """The health taints of the driver among `taints` that keep new claims off."""
    return [t for t in taints if t[2] in OFF_LIMITS and t[0] in {f"{driver}/{k}" for k in HEALTH_KEYS}]


@dataclass
class HealthRunner(Runner):
    """A Runner whose model keeps new claims off the devices it has seen tainted (or drained by its rules)."""

    # off-limits device -> the claims (owner) that held it when it became off-limits: they may keep it
    holders: dict[DeviceId, set[str]] = field(default_factory=dict)
    failed: dict[tuple[str, int], str] = field(default_factory=dict)  # (node, GPU index) -> failure kind
    rules: dict[str, DeviceId] = field(default_factory=dict)  # our DeviceTaintRules -> the device each drains
    state_dirs: dict[str, Path] = field(default_factory=dict)  # node -> its fake NVML state directory

    def open(self) -> HealthRunner:
        super().open()
        # taints another example left (a driver that never lifts them) are facts of the fleet: off-limits from the start
        self.observe_off_limits(self.snapshot())
        return self

    # --- the model --------------------------------------------------------------------------------------------

    def expected_nodes(self, pod: PodSpec, snap: Snapshot) -> dict[str, Solution] | None:
        """Where the pod fits on the devices that are not off-limits; usage from every allocation (a claim kept on a
        tainted device still consumes its counters)."""
        claims, pinned = self._pending_claims(pod, snap)
        usage = Usage.of(snap.inventory, snap.allocations())
        usable = Inventory({i: d for i, d in snap.inventory.devices.items() if i not in self.holders}, snap.inventory.counters)
        try:
            return feasible_nodes(usable, claims, usage, self.classes, pinned)
        except ModelTooLarge:
            return None

    def observe_off_limits(self, snap: Snapshot, only: set[DeviceId] | None = None) -> set[DeviceId]:
        """Record the devices whose off-limits taint the slices show now (of `only`, or all), with their holders;
        forget health-tainted devices that lost their taints. Returns the off-limits devices seen."""
        driver = self.identity.driver
        seen = {i for i, t in slice_taints(self).items() if off_limits_taints(t, driver) and (only is None or i in only)}
        owners = _owners_by_device(snap)
        for device in seen - self.holders.keys():
            self.holders[device] = owners.get(device, set())
        drained = set(self.rules.values())
        for device in list(self.holders):
            if (only is None or device in only) and device not in seen and device not in drained:
                del self.holders[device]
        return seen

    def soundness(self, snap: Snapshot) -> list[Violation]:
        return super().soundness(snap) + self.taint_respected(snap)

    def _node_side(self, snap: Snapshot) -> list[Violation]:
        """The node check, deferred while a GPU is lost: NVML answers nothing about a lost GPU, so the physical judge
        (testbed.workloads.physical_watch) cannot read that node; it judges everything again at the first step after
        the heal."""
        if "lost" in self.failed.values():
            self._count("node-checks-deferred")
            return []
        return super()._node_side(snap)

    def taint_respected(self, snap: Snapshot) -> list[Violation]:
        """No claim of ours is allocated on an off-limits device it did not already hold."""
        problems = []
        for owner, device in ((o, r.device) for o, results in snap.allocations() for r in results):
            if owner.startswith(f"{self.namespace}/") and device in self.holders and owner not in self.holders[device]:
                problems.append(Violation("taint-respected", f"{owner} was allocated {device.pool}/{device.device} after it was tainted "
                                          "NoSchedule/NoExecute", sorted(self.holders[device]), owner))
        self._count("taint-checks")
        return problems

    # --- steps ------------------------------------------------------------------------------------------------

    def arrive(self, pod: PodSpec) -> bool:
        self.observe_off_limits(self.snapshot())  # taints lifted since (a heal's) free their devices for the model
        return super().arrive(pod)

    def gpu_devices(self, node: str, gpu: int) -> set[DeviceId]:
        """The published devices of GPU `gpu` of `node` (whole GPUs: the one whose uuid is the GPU's)."""
        gpus, _ = state.validate_state_dir(self.state_dirs[node])
        uuid_ = next(g.uuid for g in gpus if g.index == gpu)
        return {d.id for d in self.snapshot().inventory.on_node(node) if d.attribute("uuid") == uuid_}

    def fail_gpu(self, node: str, gpu: int, kind: str, data: int) -> None:
        """Make the GPU fail; its device is tainted NoSchedule within the bound and nothing of ours moves."""
        before = self.snapshot()
        pods = self._placed()
        devices = self.gpu_devices(node, gpu)
        health.append(self.state_dirs[node], gpu, kind, data)
        self.failed[(node, gpu)] = kind
        self._count(f"failed-{kind}")
        try:
            until(f"an off-limits health taint on {sorted(d.device for d in devices)} of {node}",
                  lambda: devices <= {i for i, t in slice_taints(self).items() if off_limits_taints(t, self.identity.driver)},
                  timeout=TAINT_BOUND_S, interval=0.1)
        except WaitTimeout:
            shown = {f"{d.pool}/{d.device}": slice_taints(self).get(d) for d in devices}
            self.fail_if([Violation("failure-taints", f"{kind} on GPU {gpu} of {node}: no NoSchedule taint within {TAINT_BOUND_S:.0f}s",
                                    "a NoSchedule taint", shown)])
        self.observe_off_limits(before)
        after = self.snapshot()
        moved = [p for p, node_ in pods.items() if self._placed().get(p) != node_]
        now = dict(after.allocations())
        changed = [o for o, r in before.allocations() if o.startswith(f"{self.namespace}/") and now.get(o) != r]
        if moved or changed:
            self.fail_if([Violation("running-pods-stay", f"a NoSchedule taint on {node} moved pods {moved} or allocations {changed}",
                                    "unchanged", {"pods": moved, "claims": changed})], after)
        self.settle()

    def heal_gpu(self, node: str, gpu: int) -> None:
        """Heal the GPU: the node's devices lose their health taints within the bound; pods that fit then land."""
        health.append(self.state_dirs[node], gpu, "heal")
        kind = self.failed.pop((node, gpu))
        self._count("healed")
        on_node = {d.id for d in self.snapshot().inventory.on_node(node)}
        try:
            until(f"{node}'s health taints lifted", lambda: not self.observe_off_limits(self.snapshot(), on_node) & (on_node - set(self.rules.values())),
                  timeout=TAINT_BOUND_S, interval=0.1)
        except WaitTimeout:
            left = {f"{i.pool}/{i.device}": t for i, t in slice_taints(self).items() if i in on_node and off_limits_taints(t, self.identity.driver)}
            self.fail_if([Violation("heal-untaints", f"GPU {gpu} of {node} healed after {kind}: its node's devices are still tainted "
                                    f"after {TAINT_BOUND_S:.0f}s", {}, left)])
        self.settle()  # liveness: a pending pod the healed device fits must now get it

    def drain(self, device: DeviceId) -> None:
        """A NoExecute DeviceTaintRule on `device`: the pods on it are evicted and their claims released."""
        snap = self.snapshot()
        owners = _owners_by_device(snap).get(device, set())
        victims = {p: self.pod_claims(p) for p in list(self.pods) if _pod_owners(self, p) & owners}
        name = f"hm-{self.namespace}-{uuid.uuid4().hex[:4]}"
        create_rule(self.api, name, device.driver, device.pool, device.device, effect="NoExecute", key=RULE_KEY)
        self.rules[name] = device
        self.holders[device] = set()  # NoExecute: no claim may keep it
        self._count("drained")
        for pod, claims in victims.items():
            try:
                self.released(pod, claims)
                self._count("evicted")
            except WaitTimeout as exc:
                self.fail_if([Violation("noexecute-releases", f"pod {pod} on {device.pool}/{device.device} (drained NoExecute): {exc}",
                                        "evicted, its claims released", "still there")])
        self.settle()  # soundness, and the node check: nothing the evicted pods had prepared is left

    def undrain(self, name: str) -> None:
        device = self.rules.pop(name)
        delete_rule(self.api, name)
        self.observe_off_limits(self.snapshot(), {device})  # still off-limits if a health taint is on it
        self.settle()

    def restore(self) -> None:
        """Teardown: heal what this example failed and delete its rules, so the bed carries over as it came."""
        for name in list(self.rules):
            delete_rule(self.api, name)
            self.rules.pop(name)
        for node, gpu in list(self.failed):
            health.append(self.state_dirs[node], gpu, "heal")
            self.failed.pop((node, gpu))
        try:  # the next example's model starts from the taints it sees; a lift under way would read as a violation
            until("the bed's health taints lifted", lambda: not any(off_limits_taints(t, self.identity.driver) for t in slice_taints(self).values()),
                  timeout=TAINT_BOUND_S, interval=0.1)
        except WaitTimeout:
            pass  # a driver that never lifts them: that example failed heal-untaints; the next one starts with them off-limits

    def _placed(self) -> dict[str, str | None]:
        return {p.metadata.name: p.spec.node_name for p in self.core.list_namespaced_pod(self.namespace).items if p.metadata.deletion_timestamp is None}


def _owners_by_device(snap: Snapshot) -> dict[DeviceId, set[str]]:
    owners: dict[DeviceId, set[str]] = {}
    for owner, results in snap.allocations():
        for r in results:
            owners.setdefault(r.device, set()).add(owner)
    return owners


def _order(device: DeviceId) -> tuple[str, str, str]:
    return device.driver, device.pool, device.device


def _pod_owners(runner: Runner, pod: str) -> set[str]:
    return {f"{runner.namespace}/{c}" for c in runner.pod_claims(pod).values()}


def gpu_pods(name: str, gpu_class: str) -> st.SearchStrategy[PodSpec]:
    """A pod with one claim of its own for 1 or 2 whole GPUs."""
    return st.integers(1, 2).map(lambda n: PodSpec(name, (PodClaim("gpus", template=ClaimSpec(
        (Request("gpus", (SubRequest("gpus", gpu_class, count=n),)),))),)))


def health_machine(make_runner: Callable[[], HealthRunner], nodes: dict[str, int], rules: bool = True,
                   stats: dict[str, int] | None = None) -> type[RuleBasedStateMachine]:
    """The machine over `make_runner()`'s namespace; `nodes`: the bed's health-checked nodes and their GPU counts;
    `rules`: whether the server serves DeviceTaintRules (the drain rules run only then)."""
    gpus = sorted((n, g) for n, count in nodes.items() for g in range(count))

    class HealthMachine(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.runner = make_runner()
            self.made = 0

        def healthy(self) -> list[tuple[str, int]]:
            """GPUs of nodes with no failed GPU (one failure per node: a lost GPU taints all of its node)."""
            down = {n for n, _ in self.runner.failed}
            return [(n, g) for n, g in gpus if n not in down]

        @precondition(lambda self: len(self.runner.pods) < MAX_LIVE_PODS)
        @rule(data=st.data())
        def arrive(self, data):
            self.made += 1
            name = f"p{self.made}"
            self.runner.arrive(data.draw(gpu_pods(name, self.runner.identity.gpu_class), label=name))

        @precondition(lambda self: bool(self.runner.pods))
        @rule(data=st.data())
        def depart(self, data):
            self.runner.depart(data.draw(st.sampled_from(sorted(self.runner.pods)), label="pod"))

        @precondition(lambda self: bool(self.healthy()))
        @rule(data=st.data(), failure=st.sampled_from(FAILURES))
        def fail(self, data, failure):
            node, gpu = data.draw(st.sampled_from(self.healthy()), label="gpu")
            self.runner.fail_gpu(node, gpu, *failure)

        @precondition(lambda self: bool(self.runner.failed))
        @rule(data=st.data())
        def heal(self, data):
            node, gpu = data.draw(st.sampled_from(sorted(self.runner.failed)), label="failed gpu")
            self.runner.heal_gpu(node, gpu)

        @precondition(lambda self: rules and not self.runner.rules)
        @rule(data=st.data())
        def drain_noexecute(self, data):
            """Mostly a device that holds a pod of ours (the eviction is the point), else any GPU."""
            snap = self.runner.snapshot()
            held = sorted({r.device for o, rs in snap.allocations() if o.startswith(f"{self.runner.namespace}/") for r in rs}, key=_order)
            every = sorted((i for i, d in snap.inventory.devices.items() if d.node in nodes), key=_order)
            self.runner.drain(data.draw(st.sampled_from(held or every), label="device"))

        @precondition(lambda self: bool(self.runner.rules))
        @rule()
        def undrain(self):
            self.runner.undrain(sorted(self.runner.rules)[0])

        def teardown(self) -> None:
            try:
                self.runner.restore()
                self.runner.close()
            finally:
                for key, value in ({"examples": 1, **self.runner.stats} if stats is not None else {}).items():
                    stats[key] = stats.get(key, 0) + value  # type: ignore[index] - not None here

    return HealthMachine


def gpu_of(runner: HealthRunner, device: DeviceId) -> tuple[str, int]:
    """(node, GPU index) of a whole-GPU device, by its uuid attribute."""
    dev = runner.snapshot().inventory.devices[device]
    gpus, _ = state.validate_state_dir(runner.state_dirs[dev.node])
    return dev.node, next(g.index for g in gpus if g.uuid == dev.attribute("uuid"))


def failing_gpu_scenario(runner: HealthRunner, node: str) -> None:
    """Every property once, in a fixed order, on `node` of 2 whole GPUs with health checks (the smoke, and what each
    proof in suites/health/test_health_machine.py breaks): a pod takes one GPU, the other gets a fatal Xid
    (failure-taints, running-pods-stay), a second pod must wait (taint-respected), the heal lifts the taint
    (heal-untaints) and the waiting pod lands there (liveness), then a NoExecute rule drains the first pod's GPU
    (noexecute-releases, the node check) and is deleted."""
    def pod(name: str) -> PodSpec:
        claim = ClaimSpec((Request("gpus", (SubRequest("gpus", runner.identity.gpu_class),)),))
        return PodSpec(name, (PodClaim("gpus", template=claim),), node=node)

    runner.arrive(pod("first"))
    held = next(r.device for o, rs in runner.snapshot().allocations() if o.startswith(f"{runner.namespace}/") for r in rs)
    other = next(d.id for d in runner.snapshot().inventory.on_node(node) if d.id != held)
    _, gpu = gpu_of(runner, other)
    runner.fail_gpu(node, gpu, "xid", 79)
    runner.arrive(pod("second"))  # the model says it waits: placed on the tainted GPU, taint-respected fails
    runner.heal_gpu(node, gpu)
    second = {f"{runner.namespace}/{c}" for c in runner.pod_claims("second").values()}
    placed = {r.device for o, rs in runner.snapshot().allocations() if o in second for r in rs}
    if placed != {other}:
        runner.fail_if([Violation("heal-reallocates", f"after the heal the waiting pod holds {sorted(map(str, placed))}",
                                  str(other), sorted(map(str, placed)))])
    runner.drain(held)
    runner.undrain(sorted(runner.rules)[0])


def rules_served(api) -> bool:
    """Whether the server serves DeviceTaintRules (1.34 under DRADeviceTaints, 1.35+ under DRADeviceTaintRules)."""
    try:
        served_version(api)
    except DeviceTaintRulesNotServed:
        return False
    return True


def live_health_runner(api, layout_yaml: str, bundle: Path | None, state_dirs: dict[str, Path], context: dict | None = None,
                       runner_fields: dict | None = None) -> Callable[[], HealthRunner]:
    """Each example's HealthRunner on `api`'s cluster; `state_dirs`: node -> its fake NVML state directory."""
    def make() -> HealthRunner:
        return HealthRunner(api, layout_yaml, bundle_dir=bundle, context=dict(context or {}), state_dirs=dict(state_dirs),
                            **(runner_fields or {})).open()
    return make


