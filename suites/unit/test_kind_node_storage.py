"""Where kind nodes unpack images (testbed/clusters/kind/images/node_storage.py) and how images are named in them."""

from __future__ import annotations

from pathlib import Path

import pytest

from testbed.clusters.kind.images import node_files
from testbed.clusters.kind.images.node_storage import MARKER_IN_NODE, ON_DISK_ENV, SNAPSHOTS_IN_NODE, containerd_name, storage_mounts


@pytest.mark.parametrize("reference, name", [
    ("dra-testbed/driver:abc", "docker.io/dra-testbed/driver:abc"),
    ("busybox:1.37", "docker.io/library/busybox:1.37"),
    ("registry.k8s.io/pause:3.10.1", "registry.k8s.io/pause:3.10.1"),
    ("localhost:5000/x/y:1", "localhost:5000/x/y:1"),
    ("localhost/img:1", "localhost/img:1"),
])
def test_containerd_names_images_as_docker_hub_references_in_full(reference: str, name: str) -> None:
    assert containerd_name(reference) == name


def test_every_node_gets_the_in_memory_marker_unless_on_disk_is_asked_for(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.delenv(ON_DISK_ENV, raising=False)
    (mount,) = storage_mounts(tmp_path)
    assert mount.container == MARKER_IN_NODE and mount.readonly and Path(mount.host).is_file()
    monkeypatch.setenv(ON_DISK_ENV, "1")
    assert storage_mounts(tmp_path) == []


def test_the_node_entrypoint_mounts_the_tmpfs_only_for_a_marked_node_and_before_init() -> None:
    script = node_files.static_files("registry.k8s.io/pause:3.10.1", "v1.34.4")["/usr/local/bin/entrypoint"][0]
    guard = script.index(f"if [[ -f {MARKER_IN_NODE} ]]")
    mount = script.index(f"mount -t tmpfs -o mode=0700 tmpfs {SNAPSHOTS_IN_NODE}")
    assert guard < mount < script.index('exec "$@"')  # systemd, and so containerd, start after it
