"""kind backend: real kubelets in Docker containers. The cluster (cluster.py), its nodes (nodes.py) and pod
network (network.py), the Docker engine it runs on (dockerd.py), and the images it loads: the offline node
image (node_image.py with node_components, node_files, rootfs) and the driver and workload images
(driver_image.py); `dra-testbed image ...` in image_cli.py."""

from testbed.clusters.kind.cluster import KindCluster

__all__ = ["KindCluster"]
