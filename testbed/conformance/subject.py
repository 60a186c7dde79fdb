"""The subject under test: a cluster, the driver's name, and what the backend lets the suite do to it.

Probes see the cluster only through its Kubernetes API. Some capabilities go beyond the API and exist
only where the suite owns the cluster, derived from its backend's abilities (`subject_of`):
`restart-driver` (stop and start the driver, nothing else changed), `node-control` (add and delete a GPU
node), `roll-driver` (a rolling update of the driver) and `pause-driver` (keep the driver off its nodes
for a while). Against an existing cluster none exists, so the checks needing them are `not-run` there:
the suite changes nothing beyond its own namespace. A check that lists a node's MIG devices needs
`node-monitor` (the nodes' driver root). Node-side checks need `workload-image`: an image whose entry
point prints, as JSON, what NVML shows inside the container (fake_gpus/nvml/report.py on nvidia-ml-py;
`--sleep` keeps it up). A check that reads a node's NVML settings directly (a KWOK bed's nodes keep their fake
NVML state on this machine, and no container runs there to read it) needs `node-nvml`.
"""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager, TypeVar

from kubernetes import client

from fake_gpus.driver.identity import DriverIdentity
from testbed.clusters.base import Cluster, DriverPause, DriverRestart, DriverRoll, NodeControl, ability
from testbed.clusters.layout import Layout, NodeSpec
from testbed.kube.apiviews import ApiViews
from testbed.kube.namespaces import create_namespace

NAMESPACE_LABEL = "dra-testbed.io/conformance"
F = TypeVar("F", bound=Callable[[], None])


@dataclass
class Subject(ApiViews):
    """One cluster and driver under test."""

    api: client.ApiClient
    driver: str
    backend: str  # kwok | kind | existing
    layout: Layout | None = None  # the GPU nodes expected, when known
    restart_driver: Callable[[], None] | None = None
    add_node: Callable[[NodeSpec], None] | None = None
    roll_driver: Callable[[], None] | None = None
    pause_driver: Callable[[], ContextManager[None]] | None = None
    workload_image: str | None = None
    # the nodes' NVIDIA driver root (holding libnvidia-ml), where a monitoring pod loads NVML as the node's own
    # tools do: `node-monitor`
    driver_root: str | None = None
    # each node's fake-NVML state directory, where the suite's own KWOK bed keeps it: `node-nvml`
    node_nvml: Callable[[str], Path] | None = None
    # have a node's claims prepared from now on where the bed serves only some (our driver on KWOK: the node's plugin
    # joins the stand-in kubelet); None where every node's already are
    serve_node: Callable[[str], None] | None = None
    namespaces: list[str] = field(default_factory=list)

    @property
    def identity(self) -> DriverIdentity:
        """The driver's name and the DeviceClass names NVIDIA's scheme derives from it."""
        return DriverIdentity(self.driver)

    @property
    def gpu_class(self) -> str:
        return self.identity.gpu_class

    @property
    def mig_class(self) -> str:
        return self.identity.mig_class

    def capabilities(self) -> set[str]:
        caps = set()
        if self.restart_driver:
            caps.add("restart-driver")
        if self.add_node:
            caps.add("node-control")
        if self.roll_driver:
            caps.add("roll-driver")
        if self.pause_driver:
            caps.add("pause-driver")
        if self.workload_image:
            caps.add("workload-image")
        if self.driver_root:
            caps.add("node-monitor")
        if self.node_nvml:
            caps.add("node-nvml")
        return caps

    def slices(self) -> list[dict]:
        """Every ResourceSlice of the driver, in API dict form (camelCase)."""
        serialize = self.api.sanitize_for_serialization
        return [serialize(s) for s in self.resource.list_resource_slice().items if s.spec.driver == self.driver]

    def expected_nodes(self) -> dict[str, NodeSpec]:
        """GPU nodes the layout promises, by name; empty when no layout is known."""
        if self.layout is None:
            return {}
        return {n.name: n for n in self.layout.nodes}

    def namespace(self, labels: dict[str, str] | None = None) -> str:
        """A fresh namespace of the suite's own (deleted by `close`), with `labels` besides the suite's."""
        name = f"conf-{uuid.uuid4().hex[:8]}"
        create_namespace(self.core, name, {NAMESPACE_LABEL: "true", **(labels or {})})
        self.namespaces.append(name)
        return name

    def drop_namespace(self, name: str, timeout: float = 60.0) -> None:
        """Delete the namespace's pods, wait until they are gone (their devices unprepared on the node), then
        its claims (devices free), then it."""
        from kubernetes.client.exceptions import ApiException

        try:
            # Not grace 0: a force-deleted pod leaves the API at once, its claims are freed and the next check's
            # claim may get the same device while the kubelet has not unprepared it yet (seen on kind: "device
            # ... is still prepared for claim" of the previous check). With a grace period the kubelet removes
            # the pod only once its resources are unprepared (PodCouldHaveRunningContainers).
            self.core.delete_collection_namespaced_pod(name, grace_period_seconds=1)
            deadline = time.monotonic() + timeout
            while self.core.list_namespaced_pod(name).items and time.monotonic() < deadline:
                time.sleep(0.2)
            self.resource.delete_collection_namespaced_resource_claim(name)
            while self.resource.list_namespaced_resource_claim(name).items and time.monotonic() < deadline:
                time.sleep(0.2)
            self.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
        except ApiException as exc:
            if exc.status != 404:
                raise
        if name in self.namespaces:
            self.namespaces.remove(name)

    def close(self) -> None:
        for name in list(self.namespaces):
            self.drop_namespace(name)


def subject_of(cluster: Cluster, api: client.ApiClient, driver: str, layout: Layout | None, *,
               around: Callable[[F], F] = lambda action: action, workload_image: str | None = None,
               driver_root: str | None = None) -> Subject:
    """The subject of `cluster`: what the suite may do to it beyond the API is what its backend can (the
    abilities of testbed/clusters/base.py it implements and offers for the driver it runs), so a cluster
    someone else runs gets none. `around` wraps the driver restart and roll (kind: waiting out the
    kubelet's wipe of a gone plugin's slices)."""
    nodes = ability(cluster, NodeControl)
    restart = ability(cluster, DriverRestart)
    roll = ability(cluster, DriverRoll)
    pause = ability(cluster, DriverPause)
    return Subject(api, driver, cluster.backend, layout, workload_image=workload_image, driver_root=driver_root,
                   restart_driver=around(restart.restart_driver) if restart else None,
                   add_node=nodes.add_node if nodes else None,
                   roll_driver=around(roll.roll_driver) if roll else None,
                   pause_driver=pause.driver_paused if pause else None)


def write_json(path: Path, data) -> Path:
    """Evidence as pretty JSON; returns the path."""
    import json

    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    return path
