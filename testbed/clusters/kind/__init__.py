"""kind backend: real kubelets in Docker containers. The cluster (cluster.py), its nodes (nodes.py) and pod
network (network.py), the Docker engine it runs on (dockerd.py), and the images it loads: the offline node
image (node_image.py with node_components, node_files, rootfs) and the driver and workload images
(driver_image.py); `dra-testbed image ...` in image_cli.py."""

from __future__ import annotations

__all__ = ["KindCluster"]


def __getattr__(name: str):
    # the cluster (and the Kubernetes client it loads) only when asked for: the CLI imports image_cli and
    # dockerd from this package for every command, `up` on KWOK included
    if name == "KindCluster":
        from testbed.clusters.kind.cluster import KindCluster

        return KindCluster
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
