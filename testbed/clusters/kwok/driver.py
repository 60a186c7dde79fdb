"""The driver on a KWOK cluster's simulated nodes, behind one small interface per driver kind.

KWOK nodes run no kubelet, so a driver here is host processes: ours is one ResourceSlice publisher for
every node (fake_gpus.machine.launch). A vendor's kubelet-plugin binary (a process per node) plugs in as
another `KwokDriver` in DRIVERS.
"""

from __future__ import annotations

import abc
import importlib
import subprocess
from pathlib import Path

from fake_gpus.machine import launch
from testbed.clusters.base import ClusterError
from testbed.clusters.driver import DriverSpec, DriverSpecError, unsupported
from testbed.clusters.driver_identity import DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT
from testbed.clusters.layout import Layout


class KwokDriver(abc.ABC):
    """How one kind of driver starts, becomes ready and stops on a KWOK cluster whose files are in `home`."""

    def __init__(self, spec: DriverSpec) -> None:
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


class OurDriver(KwokDriver):
    """Our fake-GPU driver: one publisher process for the whole cluster, writing each node's slices with that
    node's own credential (the driver's service account, its token bound to the node)."""

    def __init__(self, spec: DriverSpec) -> None:
        super().__init__(spec)
        self._proc: subprocess.Popen | None = None

    def spawn(self, home: Path, kubeconfig: Path, layout: Layout) -> None:
        self._proc = launch.spawn_publisher(home, kubeconfig, env=self.spec.process_env(),
                                            node_identity=(DRIVER_NAMESPACE, DRIVER_SERVICE_ACCOUNT))

    def wait(self, home: Path) -> None:
        assert self._proc is not None, "wait() before spawn()"
        try:
            launch.wait_publisher(home, self._proc)
        except RuntimeError as exc:
            raise ClusterError(str(exc)) from exc

    @classmethod
    def stop(cls, home: Path) -> None:
        launch.stop_publisher(home)


# kind -> module:class, imported on first use: a vendor's driver (testbed/nvidia, NVIDIA's plugin as a process
# per node) builds on KwokDriver, so importing it here at load time would be a cycle. Every kind is known
# in any process, so that `down` stops whichever runs.
DRIVERS: dict[str, str] = {"ours": "testbed.clusters.kwok.driver:OurDriver",
                           "binary": "testbed.nvidia.kwok_driver:NvidiaBinaryDriver"}


def driver_class(kind: str) -> type[KwokDriver]:
    """The KwokDriver class of a kind in DRIVERS."""
    module, name = DRIVERS[kind].split(":")
    return getattr(importlib.import_module(module), name)


def kwok_driver(spec: DriverSpec) -> KwokDriver:
    """The KWOK implementation of `spec`; DriverSpecError naming the kinds KWOK runs otherwise."""
    if spec.kind not in DRIVERS:
        raise DriverSpecError(unsupported("kwok", spec, tuple(DRIVERS)))
    return driver_class(spec.kind)(spec)
