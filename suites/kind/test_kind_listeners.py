"""On the host, the kind bed listens on loopback only: dockerd's API is a unix socket and every port kind
publishes (the apiserver's) is bound to 127.0.0.1. Inside the node containers is the project's own network."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from testbed.host import leftovers

pytestmark = [pytest.mark.kind, pytest.mark.slow]


def _host_docker_processes() -> list[int]:
    """dockerd, containerd and docker-proxy processes of the host's network namespace."""
    own = os.readlink("/proc/self/ns/net")
    pids = []
    for pid, line in leftovers.processes().items():
        binary = Path(line.split(" ", 1)[0]).name
        try:
            same_netns = os.readlink(f"/proc/{pid}/ns/net") == own
        except OSError:
            continue
        if same_netns and binary in ("dockerd", "docker-proxy", "containerd", "containerd-shim-runc-v2"):
            pids.append(pid)
    return pids


def test_every_host_listener_of_the_kind_bed_is_on_loopback(kind_bed) -> None:
    found = leftovers.listeners_of(_host_docker_processes())
    ports = kind_bed.cluster.kubeconfig().read_text()
    assert any(f":{port}" in ports for _, _, port in found), f"the apiserver's published port was not seen: {found}"
    exposed = [(pid, address, port) for pid, address, port in found if not leftovers.is_loopback(address)]
    assert exposed == [], f"listening beyond loopback on the host: {exposed}"
