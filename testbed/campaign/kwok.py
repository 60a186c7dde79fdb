"""The campaign's KWOK target: the cluster's own driver processes, every one supervised.

A KWOK cluster of ours runs the publisher and the stand-in kubelet (python -m testbed.kubelet), which
starts each node's kubelet plugin on demand and again whenever it exits: the stand-in is the plugins'
supervisor, as a kubelet is a DaemonSet pod's. The campaign adopts the publisher, the stand-in and
kwokctl's etcd, kube-apiserver and kube-scheduler from their pid files into its Restart=always
supervisor, and only kills and watches the plugins. The stand-in, the controller-manager and the
kwok-controller are supervised but never killed.
"""

from __future__ import annotations

from pathlib import Path

from fake_gpus.driver.kubeletplugin.server import CHECKPOINT
from testbed.campaign.audit import NodeState, cdi_uids, read_checkpoint, read_instances
from testbed.campaign.probes import all_of, ready_file_probe, url_probe
from testbed.campaign.supervisor import Unit
from testbed.drivers.ours.kwok import plugin_dir as kwok_plugin_dir
from testbed.clusters.layout import Layout
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.process import KUBELET_PID, ON_DEMAND_DIR

# component kind -> kwokctl's name for its process
CONTROL_PLANE = {"etcd": "etcd", "apiserver": "kube-apiserver", "scheduler": "kube-scheduler"}
WATCHED = {"controller-manager": "kube-controller-manager", "kwok-controller": "kwok-controller"}


class KwokTarget:
    """The driver side of a running KWOK cluster of ours (`home`, `kwok_dir`)."""

    def __init__(self, home: Path, kwok_dir: Path, layout: Layout, driver: str) -> None:
        self.home, self.kwok_dir, self.layout, self.driver = home, kwok_dir, layout, driver

    # --- per node paths (as testbed.drivers.ours.kwok lays them out) ---

    def plugin_dir(self, node: str) -> Path:
        return kwok_plugin_dir(self.home, node)

    def cdi_dir(self, node: str) -> Path:
        return self.home / "plugins" / node / "cdi"

    def state_dir(self, node: str) -> Path:
        return self.home / "nvml" / node

    def start(self) -> list[Unit]:
        """Every unit to supervise."""
        units = [Unit.watched(f"plugin/{n.name}", "plugin", self.home / ON_DEMAND_DIR / f"{n.name}.pid") for n in self.layout.nodes]
        units.append(Unit.adopt("standin-kubelet", "kubelet", self.home / KUBELET_PID))
        publisher = Unit.adopt("publisher", "publisher", self.home / "publisher.pid")
        publisher.ready = ready_file_probe(self.home / "publisher.ready", publisher.pid_file)  # it has published
        units.append(publisher)
        control = {kind: Unit.adopt(name, kind, self.kwok_dir / "pids" / f"{name}.pid") for kind, name in CONTROL_PLANE.items()}
        for unit in control.values():  # back once it serves: etcd's /health, the others' /readyz
            unit.ready = url_probe(unit.argv)
        if control["etcd"].ready and control["apiserver"].ready:  # and once the apiserver serves from it again
            control["etcd"].ready = all_of(control["etcd"].ready, control["apiserver"].ready)
        units += control.values()
        # never killed, but restarted and counted if they exit: the claims' deallocation (controller-manager)
        # and the nodes' and pods' status (kwok-controller) must not quietly stop for the rest of a run
        units += [Unit.adopt(name, kind, self.kwok_dir / "pids" / f"{name}.pid") for kind, name in WATCHED.items()]
        return units

    # --- observation ---

    def prepared(self, pod) -> bool:
        """The stand-in kubelet marks a pod once NodePrepareResources succeeded for its claims."""
        return (pod.metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true"

    def node_states(self) -> list[NodeState]:
        states = []
        for node in self.layout.nodes:
            cdi = self.cdi_dir(node.name)
            names = [p.name for p in cdi.iterdir()] if cdi.is_dir() else []
            states.append(NodeState(node.name, node.mode.kind == "dynamic-mig", read_instances(self.state_dir(node.name)),
                                    read_checkpoint(self.plugin_dir(node.name) / CHECKPOINT), cdi_uids(names)))
        return states
