"""The one cluster interface every backend (kwok, kind, existing) implements, and the spec it starts from.

e2e-framework style: `create(spec)`, `delete`, `status`, `kubeconfig`, `load_images`, `export_logs`, and
`deploy_driver` to replace the driver on the nodes of a running cluster. The spec's minor, layout and
driver (with its environment) are honoured by every backend and recorded in the cluster's spec.json.
"""

from __future__ import annotations

import abc
import json
import os
import socket
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, ContextManager, TypeVar

from hostenv.dirs import state_root
from hostenv.versions import DEFAULT_MINOR
from testbed.clusters.driver import DriverSpec
from testbed.clusters.layout import Layout, NodeSpec
from testbed.errors import EnvironmentProblem

FAILURE_LOGS_ENV = "DRA_TESTBED_FAILURE_LOGS"  # where failed clusters' logs go (CI sets it)

if TYPE_CHECKING:  # the client is loaded on first use: `up` loads it while the control plane starts
    from kubernetes import client

DEFAULT_NAME = "dra-testbed"


class ClusterError(EnvironmentProblem):
    """A cluster could not be created, found or removed; the message is one line for the user."""


class ClusterStartError(ClusterError):
    """create() had started the cluster when a command, a component or a wait for one failed (what started is
    removed again): unlike a refusal before anything started (no layout, a host without docker, a node image
    that does not build), another try may pass, as on a loaded machine."""


@dataclass(frozen=True)
class ClusterSpec:
    """What to bring up: a named cluster of one Kubernetes minor with a layout of GPU nodes and the driver
    that runs on them."""

    name: str = DEFAULT_NAME
    k8s: str = DEFAULT_MINOR
    layout: Layout | None = None
    apiserver_port: int | None = None
    binaries: dict[str, str] = field(default_factory=dict)
    driver: DriverSpec = field(default_factory=DriverSpec)
    allow_large: bool = False  # above a backend's sane size (nodes, GPUs): only when asked for explicitly
    # kind: the kubelets' crash-loop back-off cap in seconds (1-300; KubeletCrashLoopBackOffMax). None keeps the
    # kubelet's default of 5 min, which makes a long kill campaign wait minutes per kill
    restart_backoff_max: float | None = None
    # KWOK: a KubeSchedulerConfiguration file for kube-scheduler (kwokctl's kubeSchedulerConfig); None: the default profile
    scheduler_config: str | None = None


@dataclass(frozen=True)
class ClusterStatus:
    """What `status` reports."""

    name: str
    backend: str
    running: bool
    kubeconfig: Path | None
    server_version: str | None = None
    nodes: int = 0
    resource_slices: int = 0
    detail: str = ""

    def as_dict(self) -> dict:
        data = asdict(self)
        data["kubeconfig"] = str(self.kubeconfig) if self.kubeconfig else None
        return data


class Cluster(abc.ABC):
    """A test-bed cluster. Backends differ in how nodes exist; tests see only this interface."""

    backend: str = ""

    def __init__(self, name: str = DEFAULT_NAME) -> None:
        self.name = name

    @property
    def home(self) -> Path:
        """This cluster's own directory of state (spec, kubeconfig, logs)."""
        return state_root() / "clusters" / self.backend / self.name

    def logs_folder(self) -> Path:
        """A new folder for this cluster's logs, outside its home so that they outlive the cluster (a home kept
        for its logs alone still counted as a cluster, and `up` of the name was refused as "already exists"):
        under $DRA_TESTBED_FAILURE_LOGS when set (CI collects it), else <state>/logs/<backend>."""
        base = Path(os.environ[FAILURE_LOGS_ENV]) if os.environ.get(FAILURE_LOGS_ENV) else state_root() / "logs" / self.backend
        return base / f"{self.backend}-{self.name}-{time.strftime('%Y%m%d-%H%M%S')}"

    @abc.abstractmethod
    def create(self, spec: ClusterSpec, force: bool = False) -> Path:
        """Bring the cluster up with its GPU nodes and slices published; returns the kubeconfig path."""

    @abc.abstractmethod
    def delete(self) -> None:
        """Tear the cluster down, leaving no process, port or file behind."""

    @abc.abstractmethod
    def exists(self) -> bool:
        """Whether a cluster of this name is known to this backend."""

    @abc.abstractmethod
    def status(self) -> ClusterStatus:
        """Whether it runs, and what it holds."""

    def kubeconfig(self) -> Path:
        """Path of the kubeconfig for this cluster."""
        path = self.home / "kubeconfig"
        if not path.is_file():
            raise ClusterError(f"no {self.backend} cluster named {self.name!r}; bring one up with `dra-testbed up --name {self.name}`")
        return path

    def api_client(self) -> client.ApiClient:
        """A Kubernetes API client for this cluster."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig()))

    def api_summary(self) -> tuple[str, int, int]:
        """Server version, node count and ResourceSlice count; raises when the apiserver does not answer."""
        from kubernetes import client

        api = self.api_client()
        try:
            version = client.VersionApi(api).get_code().git_version
            nodes = len(client.CoreV1Api(api).list_node().items)
            slices = len(client.ResourceV1Api(api).list_resource_slice().items)
        finally:
            api.close()
        return version, nodes, slices

    def offers(self, ability: type) -> bool:
        """Whether this cluster, with the driver it runs now, can do what `ability` (one of the ability
        interfaces below, which its class implements) promises; some drivers cannot follow every ability."""
        return True

    @abc.abstractmethod
    def load_images(self, *references: str) -> None:
        """Make local images available to the nodes' container runtime (ClusterError where nodes run none)."""

    @abc.abstractmethod
    def export_logs(self, folder: Path | None = None) -> Path:
        """Copy component and node logs into `folder` (default: one under the cluster's home); returns it."""

    @abc.abstractmethod
    def deploy_driver(self, driver: DriverSpec) -> None:
        """Replace the driver running on the GPU nodes by `driver` and wait until it has published again."""

    def saved_spec(self) -> dict | None:
        """The spec this cluster was created with, as recorded at `up`."""
        try:
            return json.loads((self.home / "spec.json").read_text())
        except (OSError, ValueError):
            return None

    def saved_minor(self) -> str:
        """The Kubernetes minor this cluster was created with (the default one when unknown)."""
        return (self.saved_spec() or {}).get("k8s") or DEFAULT_MINOR

    def saved_layout(self) -> Layout:
        """The layout this cluster was created with, read back from spec.json."""
        from testbed.clusters.layout import NodeSpec, parse_mode

        nodes = (self.saved_spec() or {}).get("layout") or []
        return Layout(tuple(NodeSpec(n["name"], n["board"], int(n["count"]), parse_mode(n["mode"], n["name"])) for n in nodes), name=self.name)

    def record_spec(self, spec: ClusterSpec, kubernetes: str, **extra) -> None:
        """Write spec.json: what `status`, `delete` and --reuse-cluster read back."""
        record = {"backend": self.backend, "name": self.name, **spec_record(spec), "kubernetes": kubernetes, **extra}
        (self.home / "spec.json").write_text(json.dumps(record, indent=2) + "\n")

    def record_layout(self, layout: Layout) -> None:
        """Update spec.json after the fleet changed (a node joined, left or switched mode)."""
        record = self.saved_spec()
        if record is not None:
            record["layout"] = [dict(asdict(n), mode=str(n.mode)) for n in layout.nodes]
            (self.home / "spec.json").write_text(json.dumps(record, indent=2) + "\n")

    def record_driver(self, driver: DriverSpec) -> None:
        """Update spec.json after `deploy_driver`, so --reuse-cluster compares against the driver now running."""
        record = self.saved_spec()
        if record is not None:
            record["driver"] = driver.as_dict()
            (self.home / "spec.json").write_text(json.dumps(record, indent=2) + "\n")


# -- abilities: optional interfaces a backend implements beyond `Cluster`; `ability(cluster, X)` says whether one
# is there for the driver running now. What the conformance suite may do to a bed follows from them.

class NodeControl(abc.ABC):
    """GPU nodes join and leave the running cluster: a Node registers (or is deleted) through the API and the
    running driver serves it as it serves the nodes it started with."""

    @abc.abstractmethod
    def add_node(self, node: NodeSpec) -> None:
        """A GPU node `node` joins."""

    @abc.abstractmethod
    def remove_node(self, name: str) -> None:
        """The node `name` is gone (no error when it was never there)."""


class DriverRestart(abc.ABC):
    """The running driver is stopped and started again, nothing else changed."""

    @abc.abstractmethod
    def restart_driver(self) -> None:
        """Restart every process of the driver at once, as a crash would; returns once it runs again."""


class DriverRoll(abc.ABC):
    """A rolling update of the running driver, node by node, as a DaemonSet's."""

    @abc.abstractmethod
    def roll_driver(self) -> None:
        """Replace the driver by a new generation of itself node by node; returns once every node runs it."""


class DriverPause(abc.ABC):
    """The driver is kept off every node for a while."""

    @abc.abstractmethod
    def driver_paused(self) -> ContextManager[None]:
        """Inside, no driver runs on any node; afterwards it is back and ready."""


class ImageLoading(abc.ABC):
    """Local images are copied into the nodes' container runtime (nodes that run containers)."""

    @abc.abstractmethod
    def load_images(self, *references: str, workers_only: bool = False) -> None:
        """Load `references` into every node (the workers only, when asked), skipping those already there."""


ABILITIES: tuple[type, ...] = (NodeControl, DriverRestart, DriverRoll, DriverPause, ImageLoading)
A = TypeVar("A")


def ability(cluster: Cluster, kind: type[A]) -> A | None:
    """`cluster` seen as `kind` when its backend implements that ability and offers it now, else None."""
    return cluster if isinstance(cluster, kind) and cluster.offers(kind) else None  # type: ignore[return-value]


def spec_record(spec: ClusterSpec) -> dict:
    """The parts of a spec that make two clusters interchangeable: minor, layout, driver (with its faults)."""
    from hostenv.versions import release_for

    layout = [dict(asdict(n), mode=str(n.mode)) for n in spec.layout.nodes] if spec.layout else []
    return {"k8s": release_for(spec.k8s).minor, "layout": layout, "driver": spec.driver.as_dict()}


def spec_mismatch(saved: dict | None, spec: ClusterSpec) -> str | None:
    """Why a running cluster recorded as `saved` is not one brought up from `spec` (None when it is)."""
    if saved is None:
        return "it has no recorded spec"
    wanted = spec_record(spec)
    for key in ("k8s", "layout", "driver"):
        if saved.get(key) != wanted[key]:
            return f"its {key} differs (running: {json.dumps(saved.get(key), sort_keys=True)}, wanted: {json.dumps(wanted[key], sort_keys=True)})"
    return None


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    """Whether `port` can be bound on `host` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True
