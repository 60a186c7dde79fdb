"""CDI parity: for the same claim on the same fake node, our driver's CDI spec gives a container what NVIDIA's gives.

NVIDIA's plugin prepares each claim (a whole GPU, a dynamic 1g.10gb, a 3g.40gb the scheduler allocated)
and unprepares it; then our kubelet plugin, started on the same node as the KWOK bed starts it, prepares
the same claim. Both specs go through one model of a CDI runtime (testbed.kube.cdi_view): the files a container
sees at each path (NVIDIA's create-symlinks hooks resolved to the file they name) and its device nodes must
be the same; ours may add only the fake NVML's own library and state directories. That is what lets
NVIDIA's quickstart pod (`nvidia-smi -L` in a plain image) run on our driver: its nvidia-smi and
libnvidia-ml.so.1 come from the spec. Not compared: the environment (NVIDIA sets NVIDIA_VISIBLE_DEVICES=void
and relies on device nodes; ours also names the device for plain processes, see the README).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_gpus.nvml import state
from fake_gpus.nvml.build import ensure_library
from hostenv.processes import terminate
from testbed.kube.cdi_view import container_view, read_specs
from testbed.clusters.driver import DriverSpec
from testbed.drivers.ours.kwok import OurDriver, remove_plugin_dirs
from testbed.clusters.layout import NodeSpec, parse_mode
from testbed.kubelet.standin import StandInKubelet
from testbed.drivers.nvidia import plugin
from testbed.kube.waiting import until

from suites.nvidia.test_nvidia_prepare import CLAIMS, _claim, _pod, _wait_reserved

pytestmark = pytest.mark.cluster
MODE = "dynamic-mig"


def _views(testbed, node: str, registry: Path, cdi_dir: Path, pods: dict[str, object]) -> dict[str, object]:
    """Claim name -> the container view of its CDI devices, each claim prepared alone and unprepared again
    (so each finds the node without instances, and gets the same GPU and compute instance ids)."""
    kubelet = StandInKubelet(node, plugin.DRIVER, registry)
    views = {}
    try:
        kubelet.register()
        for name, pod in pods.items():
            (ids,) = kubelet.prepare_pod(testbed.api, pod).values()
            views[name] = container_view(read_specs(cdi_dir), ids)
            kubelet.unprepare_pod(f"{pod.metadata.namespace}/{pod.metadata.name}")
    finally:
        kubelet.close()
    return views


def test_our_cdi_spec_gives_a_container_what_nvidias_gives(testbed, namespace, nvidia_node) -> None:
    node = nvidia_node("h100-80gb", 2, MODE)
    plugin.wait_published(testbed.api, node)
    pods = {}
    for name, (device_class, cel) in CLAIMS.items():
        testbed.resource.create_namespaced_resource_claim(namespace, _claim(name, device_class, cel))
        body = _pod(node.node, [name])
        body["metadata"]["name"] = f"pod-{name}"
        testbed.core.create_namespaced_pod(namespace, body)
    for name in CLAIMS:
        pods[name], _ = _wait_reserved(testbed, namespace, f"pod-{name}")

    theirs = _views(testbed, node.node, node.registry_dir, node.cdi_root, pods)
    plugin.stop(node)  # ours gets the node's hardware to itself

    home = node.home.parent.parent  # the node factory's cluster home: <home>/nvml/<node> is the node's state
    how = OurDriver(DriverSpec("ours", plugin.DRIVER)).plugin(home, testbed.kubeconfig, NodeSpec(node.node, "h100-80gb", 2, parse_mode(MODE, node.node)))
    registry = Path(how.registry)
    ours_proc = how.start(home / f"ours-{node.node}.pid")
    try:
        until(f"our plugin's registration socket (log: {how.log})", lambda: (registry / f"{plugin.DRIVER}-reg.sock").exists()
              and ours_proc.poll() is None, timeout=120)
        ours = _views(testbed, node.node, registry, home / "plugins" / node.node / "cdi", pods)
    finally:
        terminate(ours_proc.pid, 30)
        remove_plugin_dirs(home, node.node)  # and the socket root, which rmtree(registry.parent) left empty in /tmp
    assert not state.validate_state_dir(node.views.state_dir)[1].gpu_instances, "a MIG instance outlived its claim"

    fake_nvml = {str(ensure_library()), str(node.views.state_dir.resolve())}  # our fake library's own plumbing
    for name in CLAIMS:
        nv, me = theirs[name], ours[name]
        assert {"/usr/bin/nvidia-smi", "/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.1"} <= set(nv.files), (name, nv.files)
        assert set(me.files) - set(nv.files) <= fake_nvml, (name, sorted(set(me.files) - set(nv.files)))
        assert {p: me.files[p] for p in nv.files if p in me.files} == nv.files, (name, nv.files, me.files)
        assert me.device_nodes == nv.device_nodes, (name, sorted(nv.device_nodes), sorted(me.device_nodes))
        caps = [n for n in nv.device_nodes if n.startswith("/dev/nvidia-caps/")]
        assert "/dev/nvidiactl" in nv.device_nodes and len(caps) == (0 if name == "whole" else 2), (name, sorted(nv.device_nodes))
