"""Ground truth for GPU health: what NVIDIA's plugin, with gate NVMLDeviceHealthCheck, publishes as device
taints when faults are injected into a KWOK node's fake NVML.

`observe` starts NVIDIA's plugin on a fresh node of our fake hardware, applies injections one at a time
(appended to the node's fake-NVML events log, fake_gpus.nvml.health, which the plugin's NVML event set
receives) and reads the node's ResourceSlice after each. Taints come back normalized for comparison with
any other driver: device name -> sorted (key, value, effect), `timeAdded` dropped (the apiserver stamps it).
Observed facts and timings: docs/design/health.md, "NVIDIA's binary on our fake".
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from kubernetes import client

from fake_gpus.nvml import health as nvml_health
from fake_gpus.nvml import state
from hostenv.processes import alive
from testbed.clusters.layout import NodeSpec
from testbed.drivers.nvidia import nodes, plugin

HEALTH_GATE = plugin.HEALTH_GATE
IGNORE_ENV = "ADDITIONAL_XIDS_TO_IGNORE"  # the environment name of its --additional-xids-to-ignore
KINDS = (*nvml_health.KINDS, "restart")  # restart: the plugin process is stopped and started again
# NVIDIA's monitor waits up to 5 s per NVML call; our fake answers within 10 ms of the append, and the plugin
# republishes at once. An injection that changes nothing is declared settled after QUIET seconds of no change.
QUIET = 4.0
CHANGE_TIMEOUT = 30.0

Taint = tuple[str, str, str]  # (key, value, effect); value "" where the taint has none
DeviceTaints = dict[str, list[Taint]]


@dataclass(frozen=True)
class Injection:
    """One step: a fault record for GPU index `gpu` (an Xid, ECC error, lost, heal) or a plugin restart.
    `mig` (the index of one of that GPU's MIG devices, in the fake NVML's order) makes an Xid carry that
    device's GPU-instance and compute-instance ids."""

    kind: str
    gpu: int = 0
    xid: int = 0
    mig: int | None = None

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise ValueError(f"injection kind {self.kind!r}; valid: {', '.join(KINDS)}")
        if (self.kind == "xid") != (self.xid > 0):
            raise ValueError(f"an Xid number goes with kind 'xid' only; got kind {self.kind!r}, xid {self.xid}")

    def __str__(self) -> str:
        what = f"xid {self.xid}" if self.kind == "xid" else self.kind
        return what if self.kind == "restart" else f"{what} on GPU {self.gpu}{f' MIG device {self.mig}' if self.mig is not None else ''}"


@dataclass(frozen=True)
class Observation:
    """The node's taints once the injection settled; `seconds` from the append (for a restart: from the
    plugin's DRA socket appearing) to the slice showing the change, None where nothing changed in QUIET s."""

    injection: Injection
    taints: DeviceTaints
    seconds: float | None
    exited: str = ""  # the plugin's last log line where it exited (a restart it did not survive), else ""


@dataclass
class HealthRun:
    """Everything one `observe` saw: the taints at start (the first publish), then one Observation per step."""

    node: str
    initial: DeviceTaints
    steps: list[Observation] = field(default_factory=list)
    log: str = ""  # the plugin's log, for the record


def device_taints(pool: list[dict]) -> DeviceTaints:
    """Every device of the pool with its taints as sorted (key, value, effect); [] for an untainted device."""
    out: DeviceTaints = {}
    for s in pool:
        for d in s["spec"].get("devices") or []:
            out[d["name"]] = sorted((t["key"], t.get("value") or "", t["effect"]) for t in d.get("taints") or [])
    return out


def tainted(taints: DeviceTaints) -> DeviceTaints:
    """Only the devices that carry a taint: what a comparison usually wants to print."""
    return {name: ts for name, ts in taints.items() if ts}


def _current(api: client.ApiClient, node: str) -> DeviceTaints | None:
    pool = plugin.published(api, node)
    return None if pool is None else device_taints(pool)


def _settle(api: client.ApiClient, p: plugin.NodePlugin, before: DeviceTaints, since: float) -> tuple[DeviceTaints, float | None]:
    """Wait for the slice to differ from `before` (then a short grace for a second update) or QUIET s of none."""
    changed_at: float | None = None
    first = since
    now = after = before
    while True:
        time.sleep(0.05)
        seen = _current(api, p.node)
        if seen is not None:
            now = seen
        if changed_at is None and now != before:
            changed_at = first = time.monotonic()
            after = now
        elif changed_at is not None and now != after:
            after = now  # a second update (e.g. a second device): keep waiting from there
            changed_at = time.monotonic()
        waited = time.monotonic() - since
        if changed_at is None and waited > QUIET:
            return now, None
        if changed_at is not None and time.monotonic() - changed_at > 1.0:
            return after, round(first - since, 2)
        if waited > CHANGE_TIMEOUT:
            return now, None
        pid = p.pid()
        if pid is None or not alive(pid):
            raise plugin.PluginError(f"NVIDIA's plugin for node {p.node} exited: {plugin.last_log_line(p)}")


def _restart(api: client.ApiClient, binary: Path, p: plugin.NodePlugin, kubeconfig: Path, mode_kind: str,
             env: dict[str, str], gates: tuple[str, ...], before: DeviceTaints) -> tuple[DeviceTaints, float | None]:
    """Stop the plugin and start it again on the same node; the taints once its publish settled. A restart
    publishes the same pool generation (the slice is updated in place, or not at all when nothing changed),
    so its being up is told by its DRA socket, which it makes before its health monitor and first publish."""
    plugin.stop(p)
    p.socket.unlink(missing_ok=True)
    since = time.monotonic()
    plugin.start(binary, p, kubeconfig, mode_kind, env, gates)
    while not p.socket.exists():
        pid = p.pid()
        if pid is None or not alive(pid):
            raise plugin.PluginError(f"NVIDIA's plugin for node {p.node} exited after a restart: {plugin.last_log_line(p)}")
        if time.monotonic() - since > plugin.START_TIMEOUT:
            raise plugin.PluginError(f"NVIDIA's plugin for node {p.node} did not come back after a restart: {plugin.last_log_line(p)}")
        time.sleep(0.1)
    return _settle(api, p, before, time.monotonic())


def mig_instance(state_dir: Path, gpu: int, index: int) -> tuple[int, int]:
    """(GI id, CI id) of GPU `gpu`'s `index`-th MIG device in the node's fake NVML; ValueError if it has none such."""
    _, mig = state.validate_state_dir(state_dir)
    cis = [ci for ci in mig.compute_instances if ci.gpu == gpu]
    if not 0 <= index < len(cis):
        raise ValueError(f"GPU {gpu} of {state_dir} has {len(cis)} MIG devices; no MIG device {index}")
    return cis[index].gi, cis[index].id


def inject(state_dir: Path, step: Injection) -> None:
    """Append the step's fault record to the node's events log (not for 'restart')."""
    if step.mig is not None:
        gi, ci = mig_instance(state_dir, step.gpu, step.mig)
        nvml_health.append(state_dir, step.gpu, step.kind, step.xid, gi, ci)
    else:
        nvml_health.append(state_dir, step.gpu, step.kind, step.xid)


def observe(api: client.ApiClient, cluster_home: Path, kubeconfig: Path, binary: Path, node: NodeSpec,
            steps: Iterable[Injection], *, mig_layout: dict[str, int] | None = None, ignore_xids: str | None = None,
            gates: tuple[str, ...] = (HEALTH_GATE,), keep: bool = False) -> HealthRun:
    """Run NVIDIA's plugin with `gates` on a new KWOK node `node` (under `cluster_home`), apply `steps` in order
    and return the taints after each. `ignore_xids` is its ADDITIONAL_XIDS_TO_IGNORE. The node, its plugin
    and its hardware are removed afterwards unless `keep`."""
    env = {IGNORE_ENV: ignore_xids} if ignore_xids is not None else {}
    p = nodes.start_node(api, cluster_home, kubeconfig, node, binary, mig_layout, env, gates)
    try:
        assert p.views is not None
        run = HealthRun(node.name, device_taints(plugin.wait_published(api, p)))
        # NewDriver starts the health monitor (event set created, events registered) before its first publish,
        # so from the first slice on every appended fault reaches it (NVML delivers only what follows registration)
        now = run.initial
        for step in steps:
            if step.kind == "restart":
                try:
                    now, seconds = _restart(api, binary, p, kubeconfig, node.mode.kind, env, gates, now)
                except plugin.PluginError:  # the taints: what its predecessor left in the API
                    run.steps.append(Observation(step, _current(api, p.node) or {}, None, plugin.last_log_line(p)))
                    break  # nothing more to observe on this node
            else:
                since = time.monotonic()
                inject(p.views.state_dir, step)
                now, seconds = _settle(api, p, now, since)
            run.steps.append(Observation(step, now, seconds))
        run.log = p.log.read_text(errors="replace")
        return run
    finally:
        if not keep:
            nodes.remove_node(api, p)



@dataclass(frozen=True)
class Scenario:
    """A node and the injections applied to it, in order: one row group of the ground-truth table."""

    mode: str  # whole | static-mig:<layout>
    count: int
    steps: tuple[Injection, ...]
    ignore_xids: str | None = None
    board: str = "h100-80gb"


def _xid(gpu: int, xid: int, mig: int | None = None) -> Injection:
    return Injection("xid", gpu, xid, mig)


# The injection table of docs/design/health.md "NVIDIA's binary on our fake". A taint with effect None that an
# apiserver refuses makes every later republish of the node fail too, so the Xids NVIDIA ignores get nodes of
# their own, apart from the fatal ones and the lost GPU.
SCENARIOS: dict[str, Scenario] = {
    "fatal-xid-ecc-heal": Scenario("whole", 2, (_xid(0, 79), _xid(0, 48), _xid(1, 94), _xid(1, 95), Injection("ecc-single", 0),
                                                Injection("ecc-double", 1), Injection("heal", 0), Injection("restart"))),
    "ignored-xids": Scenario("whole", 8, tuple(_xid(g, x) for g, x in enumerate((13, 31, 43, 45, 68, 109, 63, 64))),
                             ignore_xids="63"),
    "ignored-then-fatal": Scenario("whole", 2, (_xid(0, 79), _xid(0, 13), _xid(1, 48))),
    "lost-heal-restart": Scenario("whole", 2, (Injection("lost", 1), Injection("heal", 1), Injection("restart"))),
    "lost-restart": Scenario("whole", 2, (Injection("lost", 1), Injection("restart"))),
    "static-mig": Scenario("static-mig:all-1g.10gb", 2, (_xid(0, 79, 1), _xid(0, 48), Injection("ecc-double", 0),
                                                        Injection("lost", 1))),
    "static-mig-ignored": Scenario("static-mig:all-1g.10gb", 1, (_xid(0, 13, 2), _xid(0, 79, 3))),
}


def observe_scenario(api: client.ApiClient, cluster_home: Path, kubeconfig: Path, binary: Path, name: str,
                     node_name: str) -> HealthRun:
    """`observe` one SCENARIOS entry on a new node `node_name`."""
    from fake_gpus.catalog import get_board
    from fake_gpus.machine.provision import usable_layouts
    from testbed.clusters.layout import parse_mode

    sc = SCENARIOS[name]
    mode = parse_mode(sc.mode, node_name)
    layout = usable_layouts(get_board(sc.board))[mode.mig_layout] if mode.kind == "static-mig" else None
    return observe(api, cluster_home, kubeconfig, binary, NodeSpec(node_name, sc.board, sc.count, mode), sc.steps,
                   mig_layout=layout, ignore_xids=sc.ignore_xids)
