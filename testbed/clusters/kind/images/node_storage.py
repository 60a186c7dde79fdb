"""Where a kind node keeps its unpacked images and container files: in memory unless asked otherwise.

containerd unpacks every image a node runs (control-plane images, the driver's, workloads') into its
overlayfs snapshotter, file by file. On this machine's disk that was the slowest part of a node's life:
the driver image (308 MB, 11,600 files) took 10.7 s to unpack on disk and 1.5 s in memory, the control
plane's images likewise. Our node image's entrypoint mounts a tmpfs over the snapshotter's directory when
the node carries MARKER_IN_NODE (a file the cluster mounts), before containerd starts. The cost is memory:
some 0.6 GB per node plus what its pods write. $DRA_TESTBED_KIND_SNAPSHOTS_ON_DISK=1 keeps them on disk.

A node container that is restarted loses them (containerd's own records survive), as it would lose a
tmpfs /var/lib/containerd; the test bed never restarts node containers, it replaces clusters.
"""

from __future__ import annotations

import os
from pathlib import Path

from testbed.host.docker.dockerd import docker
from testbed.clusters.kind.nodes import Mount

ON_DISK_ENV = "DRA_TESTBED_KIND_SNAPSHOTS_ON_DISK"
MARKER_IN_NODE = "/etc/dra-testbed/containerd-snapshots-in-memory"
SNAPSHOTS_IN_NODE = "/var/lib/containerd/io.containerd.snapshotter.v1.overlayfs"


def storage_mounts(home: Path) -> list[Mount]:
    """The mounts every node of the cluster at `home` gets: the in-memory marker, unless on disk is asked for."""
    if os.environ.get(ON_DISK_ENV):
        return []
    marker = home / "snapshots-in-memory"
    marker.write_text(f"containerd's snapshots on a tmpfs in every node (testbed/clusters/kind/images/node_storage.py; {ON_DISK_ENV}=1 to keep them on disk)\n")
    return [Mount(str(marker), MARKER_IN_NODE, readonly=True)]


# unpack each image, then drop the read-only view used to do it (the unpacked layers stay, as containerd's own)
UNPACK_SCRIPT = """set -e
target=$(mktemp -d /run/dra-testbed-unpack.XXXXXX)
for ref in "$@"; do
  ctr --namespace k8s.io images mount --rw=false "$ref" "$target" >/dev/null
  ctr --namespace k8s.io images unmount --rm "$target" >/dev/null
done
rmdir "$target"
"""
KUBE_PROXY = "/kube-proxy:"


def containerd_name(reference: str) -> str:
    """An image reference as the node's containerd names it (Docker Hub's short names in full)."""
    if "/" not in reference:
        return f"docker.io/library/{reference}"
    host = reference.split("/")[0]
    return reference if "." in host or ":" in host or host == "localhost" else f"docker.io/{reference}"


def unpack_images(node: str, references: list[str]) -> None:
    """Unpack `references` (and kube-proxy, which every node runs) in the node's containerd now, so the
    first pods using them start without unpacking; DockerError until the node's containerd answers."""
    listed = docker("exec", node, "ctr", "--namespace", "k8s.io", "images", "ls", "-q", timeout=30).stdout.split()
    wanted = [containerd_name(r) for r in references] + [name for name in listed if KUBE_PROXY in name]
    docker("exec", node, "sh", "-c", UNPACK_SCRIPT, "unpack", *[name for name in wanted if name in listed], timeout=120)
