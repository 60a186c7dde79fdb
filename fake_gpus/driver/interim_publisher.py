"""Interim ResourceSlice publisher for simulated (KWOK) nodes: whole GPUs only, straight from the catalog.

It already speaks the driver's identity (names, classes, attributes), so manifests written against it
keep working when the NVML-backed driver takes its place.
"""

from __future__ import annotations

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import Board, get_board
from fake_gpus.driver.identity import (
    ARCHITECTURE_NAMES,
    BRAND_NAMES,
    DriverIdentity,
    cuda_version,
    gpu_uuid,
    pci_bus_id,
    semver,
)
from testbed.clusters.layout import Layout, NodeSpec

SUPPORTED_MODES = ("whole",)


class ModeNotSupportedError(ValueError):
    """A node mode the interim publisher cannot serve yet."""


def check_layout(layout: Layout) -> None:
    """Refuse, before anything starts, modes that need the NVML-backed driver."""
    for node in layout.nodes:
        get_board(node.board)  # a board missing from the catalog fails here, before anything starts
        if node.mode.kind not in SUPPORTED_MODES:
            raise ModeNotSupportedError(
                f"node {node.name}: mode {node.mode} is not supported yet (it needs the NVML-backed driver); "
                f"valid now: {', '.join(SUPPORTED_MODES)}"
            )


def whole_gpu_device(board: Board, node: str, index: int) -> dict:
    """The v1 device entry for whole GPU `index` of `node`."""
    major, minor = board.cuda_compute_capability
    bus = pci_bus_id(index)
    return {
        "name": f"gpu-{index}",
        "attributes": {
            "type": {"string": "gpu"},
            "uuid": {"string": gpu_uuid(node, index)},
            "productName": {"string": board.product_name},
            "brand": {"string": BRAND_NAMES.get(board.nvml_brand, "Unknown")},
            "architecture": {"string": ARCHITECTURE_NAMES.get(board.nvml_architecture, "Unknown")},
            "cudaComputeCapability": {"version": f"{major}.{minor}.0"},
            "driverVersion": {"version": semver(board.driver_version)},
            "cudaDriverVersion": {"version": cuda_version(board.cuda_driver_version)},
            "resource.kubernetes.io/pciBusID": {"string": bus[4:].lower()},
            "resource.kubernetes.io/pcieRoot": {"string": f"pci{bus[4:8]}:{bus[9:11].lower()}"},
        },
        "capacity": {"memory": {"value": f"{board.memory_mib}Mi"}},
    }


def node_slice(node: NodeSpec, identity: DriverIdentity, node_uid: str | None = None) -> dict:
    """The ResourceSlice holding every whole GPU of `node`, owned by its Node object."""
    board = get_board(node.board)
    metadata: dict = {
        "name": f"{node.name}-{identity.driver}",
        "labels": {"app.kubernetes.io/managed-by": "dra-testbed"},
    }
    if node_uid:
        # Owned by the Node so the garbage collector removes the slice when the node goes.
        metadata["ownerReferences"] = [{"apiVersion": "v1", "kind": "Node", "name": node.name, "uid": node_uid}]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": metadata,
        "spec": {
            "driver": identity.driver,
            "nodeName": node.name,
            "pool": {"name": node.name, "generation": 1, "resourceSliceCount": 1},
            "devices": [whole_gpu_device(board, node.name, i) for i in range(node.count)],
        },
    }


def _apply(create, read, replace, body: dict) -> None:
    """Create `body`, or replace the object of that name when it exists already."""
    name = body["metadata"]["name"]
    try:
        create(body=body)
    except ApiException as exc:
        if exc.status != 409:
            raise
        body["metadata"]["resourceVersion"] = read(name).metadata.resource_version
        replace(name=name, body=body)


def publish(api: client.ApiClient, layout: Layout, identity: DriverIdentity) -> None:
    """Create the DeviceClasses and one ResourceSlice per node of `layout` (nodes must exist)."""
    check_layout(layout)
    resource = client.ResourceV1Api(api)
    core = client.CoreV1Api(api)
    for device_class in identity.device_classes():
        _apply(resource.create_device_class, resource.read_device_class, resource.replace_device_class, device_class)
    for node in layout.nodes:
        body = node_slice(node, identity, core.read_node(node.name).metadata.uid)
        _apply(resource.create_resource_slice, resource.read_resource_slice, resource.replace_resource_slice, body)
