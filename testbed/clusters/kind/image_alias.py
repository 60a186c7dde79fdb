"""A local image loaded into a kind cluster's nodes under a name of its own (`dra-testbed image load --as`).

The second name is made inside each node's containerd (`ctr images tag`), never in the local Docker engine: a
user's own image of that name there stays as it was, and the alias lives and dies with the cluster.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from testbed.clusters.kind.images.node_storage import containerd_name
from testbed.host.docker.dockerd import docker

if TYPE_CHECKING:
    from testbed.clusters.kind.cluster import KindCluster


def load_as(cluster: KindCluster, source: str, alias: str | None = None, workers_only: bool = False) -> list[str]:
    """Load `source` into the cluster's nodes (the workers only, when asked) and, with `alias`, tag it there as
    `alias` too (replacing what that name pointed at in the nodes); returns the nodes it went to."""
    cluster.load_images(source, workers_only=workers_only)
    nodes = [n for n in cluster.node_containers() if not (workers_only and n.endswith("-control-plane"))]
    if alias and containerd_name(alias) != containerd_name(source):
        for node in nodes:
            docker("exec", node, "ctr", "--namespace", "k8s.io", "images", "tag", "--force",
                   containerd_name(source), containerd_name(alias), timeout=60)
    return nodes
