"""Parity of shared and strategy-configured claims: for the same claims on the same fake node, our kubelet plugin
gives a container, the GPUs and the API server what NVIDIA's gpu-kubelet-plugin gives (docs/design/sharing.md, "CDI").

Two claims sharing one whole GPU (`whole:shares=memory`, NVIDIA with --consumable-shares memory), a TimeSlicing
claim and an MPS claim (NVIDIA with gates TimeSlicingSettings and MPSSupport; its MPS control-daemon template is
ours, testbed/drivers/nvidia/templates/, shown at /templates in its mount namespace). NVIDIA's plugin prepares every
claim of the node before any is unprepared (shared claims must coexist); then ours does the same on the same
hardware. Compared, with every claim prepared: the container views (testbed.kube.cdi_view) with their mount
options, each GPU's compute mode and time slice as NVML reports them, and the MPS control-daemon Deployments on
the node. Equal apart from named constants: each driver's MPS directory root, ours' fake-NVML plumbing (as in
test_cdi_parity) and the variables listed in UNCOMPARED_ENV.
"""

from __future__ import annotations

from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

import pytest
from kubernetes import client

from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.kubeletplugin.driver import SHARING_IGNORED
from fake_gpus.nvml import state
from fake_gpus.nvml.build import ensure_library
from hostenv.processes import terminate
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import NodeSpec, parse_mode
from testbed.drivers.nvidia import plugin
from testbed.drivers.ours.kwok import OurDriver, plugin_dir, remove_plugin_dirs
from testbed.kube.cdi_view import ContainerView, container_view, mount_options, read_specs
from testbed.kube.waiting import until
from testbed.kubelet.standin import StandInKubelet

from suites.nvidia.test_nvidia_prepare import _claim, _gpu_settings, _pod, _wait_reserved

pytestmark = pytest.mark.cluster
BOARD = "h100-80gb"
STRATEGY_GATES = ("TimeSlicingSettings=true", plugin.MPS_GATE)
MPS_ROOT = "<mps>"  # each driver's MPS directory root, a named constant of the comparison
# Not compared, as test_cdi_parity leaves the environment out: the variables that name devices for plain processes
# (ours) or say `void` (NVIDIA's), our fake NVML's own, and where NVIDIA's hooks find libcuda (a constant of
# every spec NVIDIA writes, sharing or not: docs/design/sharing.md "CDI")
UNCOMPARED_ENV = ("NVIDIA_VISIBLE_DEVICES", "FAKE_NVML_STATE_DIR", "LD_LIBRARY_PATH", "NVIDIA_CTK_LIBCUDA_DIR")
OUR_VISIBILITY_PREFIX = "FAKE_NVML_VISIBLE_"


def gpu_config(strategy: str, **sharing) -> dict:
    return {"apiVersion": "resource.nvidia.com/v1beta1", "kind": "GpuConfig", "sharing": {"strategy": strategy, **sharing}}


def configured_claim(name: str, config: dict | None = None, memory: str | None = None) -> dict:
    """A one-GPU claim (request `r`) with an opaque `config`, asking `memory` of a shareable GPU's capacity."""
    body = _claim(name, "gpu.nvidia.com", None)
    if memory is not None:
        body["spec"]["devices"]["requests"][0]["exactly"]["capacity"] = {"requests": {"memory": memory}}
    if config is not None:
        body["spec"]["devices"]["config"] = [{"requests": ["r"], "opaque": {"driver": plugin.DRIVER, "parameters": config}}]
    return body


SHARED, STRATEGIES = "whole:shares=memory", "whole"
CASES = {  # node mode -> claims on it (name -> body)
    SHARED: {"share-a": configured_claim("share-a", memory="4Gi"), "share-b": configured_claim("share-b", memory="4Gi")},
    STRATEGIES: {"sliced": configured_claim("sliced", gpu_config("TimeSlicing", timeSlicingConfig={"interval": "Long"})),
                 "mps": configured_claim("mps", gpu_config("MPS", mpsConfig={"defaultActiveThreadPercentage": 50}))},
}


@dataclass(frozen=True)
class Prepared:
    """What one driver gave with every claim prepared: claim -> container view and mount options, GPU uuid ->
    (compute mode, time slice), the names of the node's MPS control-daemon Deployments."""

    views: dict[str, ContainerView]
    options: dict[str, dict[str, tuple[str, ...]]]
    gpus: dict[str, tuple[int, int]]
    daemons: list[str]


def node_daemons(testbed, node: str) -> list[str]:
    """Deployments, in any namespace, whose pods are pinned to `node` and that are not being deleted."""
    return sorted(d.metadata.name for d in client.AppsV1Api(testbed.api).list_deployment_for_all_namespaces().items
                  if d.spec.template.spec.node_name == node and d.metadata.deletion_timestamp is None)


def prepare_all(testbed, node: str, registry: Path, cdi_dir: Path, pods: dict, mps_root: Path, state_dir: Path) -> Prepared:
    """Prepare every pod's claim, observe, unprepare them all; host paths under the driver's MPS root `mps_root`
    named MPS_ROOT."""
    kubelet = StandInKubelet(node, plugin.DRIVER, registry)
    root = str(mps_root.resolve())
    named = lambda host: host.replace(root, MPS_ROOT, 1) if host.startswith(root + "/") else host  # noqa: E731
    views, options = {}, {}
    try:
        kubelet.register()
        ids = {name: next(iter(kubelet.prepare_pod(testbed.api, pod).values())) for name, pod in pods.items()}
        for name, device_ids in ids.items():
            view = container_view(read_specs(cdi_dir), device_ids)
            views[name] = ContainerView({p: named(h) for p, h in view.files.items()}, view.device_nodes, view.env)
            options[name] = mount_options(read_specs(cdi_dir), device_ids)
        gpus = {g.uuid: _gpu_settings(state_dir, g.uuid) for g in state.validate_state_dir(state_dir)[0]}
        daemons = node_daemons(testbed, node)
        for pod in pods.values():
            kubelet.unprepare_pod(f"{pod.metadata.namespace}/{pod.metadata.name}")
    finally:
        kubelet.close()
    return Prepared(views, options, gpus, daemons)


@contextmanager
def our_plugin(testbed, node: plugin.NodePlugin, mode: str, faults: tuple[str, ...] = ()) -> Iterator[tuple[Path, Path, Path]]:
    """Our kubelet plugin on NVIDIA's node `node` (its plugin stopped), as the KWOK bed starts it, with fault
    switches `faults`; yields its (registry, CDI directory, MPS root)."""
    home = node.home.parent.parent  # the node factory's cluster home: <home>/nvml/<node> is the node's state
    spec = DriverSpec("ours", plugin.DRIVER, env=fault_env(faults) if faults else {})
    count = len(state.validate_state_dir(node.views.state_dir)[0])
    how = OurDriver(spec).plugin(home, testbed.kubeconfig, NodeSpec(node.node, BOARD, count, parse_mode(mode, node.node)))
    registry = Path(how.registry)
    proc = how.start(home / f"ours-{node.node}.pid")
    try:
        until(f"our plugin's registration socket (log: {how.log})",
              lambda: (registry / f"{plugin.DRIVER}-reg.sock").exists() and proc.poll() is None, timeout=120)
        yield registry, home / "plugins" / node.node / "cdi", plugin_dir(home, node.node) / "mps"
    finally:
        terminate(proc.pid, 30)
        remove_plugin_dirs(home, node.node)


def both(testbed, namespace, nvidia_node, mode: str, faults: tuple[str, ...] = ()) -> tuple[Prepared, Prepared, Path]:
    """(NVIDIA's, ours with `faults`, the node's state directory) for CASES[mode] on a fresh node in `mode`: one
    GPU for all claims when it shares, else one per claim."""
    claims = CASES[mode]
    node = nvidia_node(BOARD, 1 if mode == SHARED else len(claims), mode, gates=STRATEGY_GATES)
    plugin.wait_published(testbed.api, node)
    for name, body in claims.items():
        testbed.resource.create_namespaced_resource_claim(namespace, body)
        pod = _pod(node.node, [name])
        pod["metadata"]["name"] = f"pod-{name}"
        testbed.core.create_namespaced_pod(namespace, pod)
    pods = {name: _wait_reserved(testbed, namespace, f"pod-{name}")[0] for name in claims}
    state_dir = node.views.state_dir
    theirs = prepare_all(testbed, node.node, node.registry_dir, node.cdi_root, pods, node.plugins_dir / plugin.DRIVER / "mps", state_dir)
    plugin.stop(node)  # ours gets the node's hardware to itself
    with our_plugin(testbed, node, mode, faults) as (registry, cdi_dir, mps_root):
        ours = prepare_all(testbed, node.node, registry, cdi_dir, pods, mps_root, state_dir)
    return theirs, ours, state_dir


def differences(nv: Prepared, me: Prepared, state_dir: Path) -> list[str]:
    """What ours gave that NVIDIA's did not, one line each; [] when equal apart from the named constants."""
    fake_nvml = {str(ensure_library()), str(state_dir.resolve())}  # our fake library's own plumbing
    env = lambda e: {k: v for k, v in e.items() if k not in UNCOMPARED_ENV and not k.startswith(OUR_VISIBILITY_PREFIX)}  # noqa: E731
    found = []
    for name, theirs in nv.views.items():
        ours = me.views[name]
        if extra := set(ours.files) - set(theirs.files) - fake_nvml:
            found.append(f"{name}: only ours mounts {sorted(extra)}")
        if (mine := {p: ours.files.get(p) for p in theirs.files}) != theirs.files:
            found.append(f"{name}: files ours {mine}, NVIDIA's {theirs.files}")
        if {p: me.options[name].get(p) for p in nv.options[name]} != nv.options[name]:
            found.append(f"{name}: mount options ours {me.options[name]}, NVIDIA's {nv.options[name]}")
        if ours.device_nodes != theirs.device_nodes:
            found.append(f"{name}: device nodes ours {sorted(ours.device_nodes)}, NVIDIA's {sorted(theirs.device_nodes)}")
        if env(ours.env) != env(theirs.env):
            found.append(f"{name}: environment ours {env(ours.env)}, NVIDIA's {env(theirs.env)}")
    if me.gpus != nv.gpus:
        found.append(f"GPUs (compute mode, time slice): ours {me.gpus}, NVIDIA's {nv.gpus}")
    if me.daemons != nv.daemons:
        found.append(f"MPS control daemons: ours {me.daemons}, NVIDIA's {nv.daemons}")
    return found


@pytest.mark.parametrize("mode", list(CASES))
def test_shared_and_configured_claims_prepare_as_nvidias(testbed, namespace, nvidia_node, mode) -> None:
    theirs, ours, state_dir = both(testbed, namespace, nvidia_node, mode)
    if mode == SHARED:  # the claims really share: one GPU, both claims' containers given it
        assert theirs.views["share-a"].device_nodes == theirs.views["share-b"].device_nodes
    else:  # the strategies took effect on NVIDIA's side, so equality says something
        assert sorted(theirs.gpus.values()) == [(0, 3), (3, 0)], theirs.gpus  # (DEFAULT, Long) and EXCLUSIVE_PROCESS
        assert len(theirs.daemons) == 1 and theirs.views["mps"].env.get("CUDA_MPS_PIPE_DIRECTORY") == "/tmp/nvidia-mps"
    assert differences(theirs, ours, state_dir) == []


def test_the_comparison_sees_strategies_left_unapplied(testbed, namespace, nvidia_node) -> None:
    """The check can fail: ours under `sharing-ignored` (no time slice, no MPS daemon or edits) differs."""
    theirs, ours, state_dir = both(testbed, namespace, nvidia_node, STRATEGIES, faults=(SHARING_IGNORED,))
    found = differences(theirs, ours, state_dir)
    assert any(f.startswith("GPUs (compute mode, time slice)") for f in found), found
    assert any(f.startswith("MPS control daemons: ours []") for f in found), found
    assert any(f.startswith("mps: environment") for f in found) and any(f.startswith("mps: files") for f in found), found
