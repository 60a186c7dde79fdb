"""What an install would collide with, found before anything is made: one line naming it.

A layout node that exists already (a real node, or another release's fake one), ResourceSlices of
gpu.nvidia.com on a layout node (a real driver publishing there), and another release's fleet (its layout
ConfigMap) in the cluster."""

from __future__ import annotations

from kubernetes import client

from fake_gpus.driver.identity import DEFAULT_DRIVER
from testbed.clusters.layout import Layout
from testbed.errors import BadInputError
from testbed.install.values import LAYOUT_LABEL, RELEASE_LABEL


class CollisionError(BadInputError):
    """The install would collide with what the cluster holds; the message is one line."""


def check_collisions(api: client.ApiClient, layout: Layout, release: str) -> None:
    """Refuse (CollisionError) to install `layout` as `release` where it would collide."""
    wanted = {n.name for n in layout.nodes}
    for cm in client.CoreV1Api(api).list_config_map_for_all_namespaces(label_selector=LAYOUT_LABEL).items:
        other = (cm.metadata.labels or {}).get(RELEASE_LABEL)
        if other != release:
            raise CollisionError(f"release {other!r} already has a fake fleet here (ConfigMap {cm.metadata.namespace}/{cm.metadata.name}); "
                                 f"uninstall it first or install into another cluster")
    slices = client.ResourceV1Api(api).list_resource_slice(field_selector=f"spec.driver={DEFAULT_DRIVER}").items
    for item in slices:
        if item.spec.node_name in wanted:
            raise CollisionError(f"node {item.spec.node_name} already has ResourceSlices of {DEFAULT_DRIVER} ({item.metadata.name}): "
                                 f"a driver publishes there; choose layout node names that no node of the cluster has")
    for node in client.CoreV1Api(api).list_node().items:
        if node.metadata.name in wanted:
            owner = (node.metadata.labels or {}).get(RELEASE_LABEL)
            what = f"a fake node of release {owner!r}" if owner else "a node of the cluster"
            raise CollisionError(f"node {node.metadata.name} already exists ({what}); choose layout node names that no node of the cluster has")
