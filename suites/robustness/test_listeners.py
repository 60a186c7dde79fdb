"""Every component of a running KWOK test bed listens on loopback only (read off /proc, not the config)."""

from __future__ import annotations

import pytest

from testbed.host import leftovers
from testbed.clusters.kwok import KwokCluster

pytestmark = pytest.mark.cluster


def test_every_listener_of_the_kwok_bed_is_on_loopback(testbed) -> None:
    cluster = KwokCluster(testbed.name)
    pids = dict(cluster.pids())
    publisher = cluster.home / "publisher.pid"
    if publisher.is_file():
        pids["publisher"] = int(publisher.read_text())
    assert {"etcd", "kube-apiserver", "kube-scheduler", "kube-controller-manager"} <= set(pids), pids
    found = leftovers.listeners_of(list(pids.values()))
    names = {pid: name for name, pid in pids.items()}
    listening = {names[pid] for pid, _, _ in found}
    assert {"etcd", "kube-apiserver"} <= listening, found  # the check sees real sockets
    exposed = [(names[pid], address, port) for pid, address, port in found if not leftovers.is_loopback(address)]
    assert exposed == [], f"listening beyond loopback: {exposed}"
