"""`--allow-large` brings the control plane up with the large-fleet settings (testbed/clusters/kwok/tuning.py),
read back from the running components: the slices' watch cache is off while other resources keep theirs,
the apiserver authorizes by RBAC alone (no Node authorizer graph), the scheduler and controller-manager
run under a soft memory limit sized by the machine (the controller-manager alone at GOGC=50), the scheduler
runs with DRADeviceTaints off (one --feature-gates, the others as every component has them) and the
device-taint eviction controller does not run."""

from __future__ import annotations

import re
import uuid
from pathlib import Path

import pytest
from kubernetes import client

from testbed.clusters.base import ClusterSpec
from testbed.clusters.kwok import KwokCluster
from testbed.clusters.features import feature_gates
from testbed.clusters.kwok.tuning import GO_COMPONENTS, GOGC, MEMORY_SHARES, SCHEDULER_GATES_OFF, machine_memory
from testbed.clusters.layout import Layout, Mode, NodeSpec

pytestmark = pytest.mark.cluster


def watch_caches(api: client.ApiClient) -> set[str]:
    """Resources the apiserver keeps a watch cache of, from its own metrics."""
    text = api.rest_client.pool_manager.request("GET", f"{api.configuration.host}/metrics").data.decode()
    return set(re.findall(r'^apiserver_watch_cache_initializations_total\{[^}]*resource="([^"]+)"', text, re.M))


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    return dict(p.decode().split("=", 1) for p in pairs if b"=" in p)


@pytest.mark.parametrize("large", [True, False], ids=["allow-large", "default"])
def test_large_fleet_settings_are_in_force_only_when_asked_for(large: bool, request) -> None:
    name = f"lf-{uuid.uuid4().hex[:8]}"
    cluster = KwokCluster(name)
    layout = Layout((NodeSpec("gpu-0", "h100-80gb", 1, Mode("dynamic-mig")),))
    try:
        cluster.create(ClusterSpec(name=name, layout=layout, allow_large=large, k8s=request.config.option.k8s))
        api = cluster.api_client()
        try:
            caches = watch_caches(api)
            assert any(r == "nodes" for r in caches), caches  # the metric is there at all
            assert any(r == "resourceslices" for r in caches) is not large, caches
            assert client.ResourceV1Api(api).list_resource_slice().items, "slices still listed without their cache"
        finally:
            api.close()
        pids = cluster.pids()
        for component in ("kube-apiserver", "kube-scheduler", "kube-controller-manager"):
            env = environ(pids[component])
            assert env.get("GOGC") == (GOGC.get(component) if large else None), component
            limit = f"{int(machine_memory() * MEMORY_SHARES[component]) >> 20}MiB" if large and component in GO_COMPONENTS else None
            assert env.get("GOMEMLIMIT") == limit, component
        scheduler = Path(f"/proc/{pids['kube-scheduler']}/cmdline").read_bytes().decode().split("\0")
        gates = [a for a in scheduler if a.startswith("--feature-gates=")]
        assert len(gates) == 1, gates
        # the bed's gates of its minor, less on a large bed those the scheduler must not have (none where the
        # minor locks them on, as 1.38 does, and the bed sets none)
        bed_gates = feature_gates(cluster.saved_minor())
        off = {g for g in SCHEDULER_GATES_OFF if bed_gates.get(g)} if large else set()
        wanted = {f"{g}={'false' if g in off else str(v).lower()}" for g, v in bed_gates.items()}
        assert set(gates[0].removeprefix("--feature-gates=").split(",")) == wanted, gates
        apiserver = Path(f"/proc/{pids['kube-apiserver']}/cmdline").read_bytes().decode().split("\0")
        modes = [a.split("=", 1)[1] for a in apiserver if a.startswith("--authorization-mode=")]
        assert modes == (["RBAC"] if large else ["Node,RBAC"]), modes
        kcm = Path(f"/proc/{pids['kube-controller-manager']}/cmdline").read_bytes().decode()
        assert ("-device-taint-eviction-controller" in kcm) is large
    finally:
        cluster.delete()
