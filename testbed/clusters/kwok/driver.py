"""What a driver implements to run on a KWOK cluster's simulated nodes.

KWOK nodes run no kubelet, so a driver here is host processes: ours is one ResourceSlice publisher for
every node and, per node, a kubelet plugin that the stand-in kubelet (testbed.kubelet) starts when the
node's first claim-holding pod arrives; a vendor's kubelet-plugin binary is a process per node. Each
registered driver (testbed.clusters.driver) names its `KwokDriver` class for the "kwok" backend.
"""

from __future__ import annotations

import abc
from pathlib import Path

from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec, DriverSpecError, implementations, unsupported
from testbed.clusters.layout import Layout, NodeSpec


ROLL_TIMEOUT = 120.0  # seconds the stand-in gets to replace the nodes' plugins in a driver update (START_GRACE is 60)


class KwokDriver(abc.ABC):
    """How one driver starts, becomes ready and stops on a KWOK cluster whose files are in `home`."""

    runs: tuple[str, ...] = ()  # the ways of running it (DriverSpec.way) this class takes

    def __init__(self, spec: DriverSpec) -> None:
        if spec.way not in self.runs:
            raise DriverSpecError(unsupported("kwok", spec, self.runs))
        self.spec = spec

    @abc.abstractmethod
    def spawn(self, home: Path, kubeconfig: Path, layout: Layout) -> None:
        """Start without waiting; may run before the control plane is up (kubeconfig not yet written)."""

    @abc.abstractmethod
    def wait(self, home: Path) -> None:
        """Return once the driver has published every node's slices; ClusterError (one line) otherwise."""

    @classmethod
    @abc.abstractmethod
    def stop(cls, home: Path) -> None:
        """Stop every process of this kind of driver at `home`; safe to call when none runs."""

    def join(self, home: Path, kubeconfig: Path, node: NodeSpec) -> None:
        """Serve `node`, which joins (or changed its mode) while the driver runs, as a DaemonSet would."""
        raise ClusterError(f"driver {self.spec.driver!r} on KWOK serves only the nodes it started with; valid for node changes: ours")

    def leave(self, home: Path, node: str) -> None:
        """Stop serving `node`, which left."""
        raise ClusterError(f"driver {self.spec.driver!r} on KWOK serves only the nodes it started with; valid for node changes: ours")

    def roll(self, home: Path, kubeconfig: Path, layout: Layout) -> None:
        """Replace the running driver by this spec's, node by node as a DaemonSet's rolling
        update does, leaving the kubelets running; returns once it has published again."""
        raise ClusterError(f"driver {self.spec.driver!r} on KWOK cannot be rolled; valid: ours (or deploy_driver)")


def kwok_driver(spec: DriverSpec) -> KwokDriver:
    """The KWOK implementation of `spec`; DriverSpecError when KWOK cannot run it."""
    return spec.implementation("kwok")


def stop_every_driver(home: Path) -> None:
    """Stop whichever registered driver runs at `home` (each one's stop is a no-op when it does not)."""
    found = implementations("kwok")
    if not found:  # a process that loaded no driver package would stop nothing and say nothing
        raise ClusterError("no driver under test is registered in this process (its driver packages were never loaded): nothing would be stopped")
    for implementation in found:
        implementation.stop(home)
