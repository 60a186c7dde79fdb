"""KWOK nodes served by NVIDIA's plugin: the Node object, its fake hardware, its plugin process."""

from __future__ import annotations

from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver.nvml_adapter import NvmlLibrary
from fake_gpus.driver.publisher import DRIVER_LABEL
from fake_gpus.machine.provision import provision_node
from fake_gpus.nvml.build import SONAME, ensure_library
from testbed.clusters.kwok.nodes import node_object
from testbed.clusters.layout import NodeSpec
from testbed.drivers.nvidia import plugin


def nvidia_node_object(node: NodeSpec) -> dict:
    """The KWOK Node, labelled so that our publisher leaves it to NVIDIA's plugin."""
    body = node_object(node)
    body["metadata"]["labels"][DRIVER_LABEL] = "nvidia"
    return body


def start_node(api: client.ApiClient, cluster_home: Path, kubeconfig: Path, node: NodeSpec, binary: Path,
               mig_layout: dict[str, int] | None = None, env: dict[str, str] | None = None,
               gates: tuple[str, ...] = ()) -> plugin.NodePlugin:
    """Create the Node (if missing) and its hardware, and start its plugin (not waiting for its slices)."""
    try:
        client.CoreV1Api(api).create_node(body=nvidia_node_object(node))
    except ApiException as exc:
        if exc.status != 409:
            raise
    nvml = NvmlLibrary(ensure_library() / SONAME) if mig_layout else None
    views = provision_node(plugin.state_dir(cluster_home, node.name), node.board, node.count, mig_layout, nvml)
    p = plugin.node_plugin(cluster_home, node.name, views)
    p.home.mkdir(parents=True, exist_ok=True)
    plugin.start(binary, p, kubeconfig, node.mode.kind, env, gates, node.mode.shares, node.mode.health)
    return p


def remove_node(api: client.ApiClient, p: plugin.NodePlugin) -> None:
    """Stop the node's plugin, delete the Node (its slices go with it) and its hardware."""
    import shutil

    plugin.remove(p)
    try:
        client.CoreV1Api(api).delete_node(p.node)
    except ApiException as exc:
        if exc.status != 404:
            raise
    if p.views is not None:
        shutil.rmtree(p.views.state_dir, ignore_errors=True)
