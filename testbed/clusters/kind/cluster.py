"""kind backend: real kubelets in Docker containers, one worker per layout node, each with its own
fake-NVML state directory mounted from the host (nodes.py); pod networking in network.py."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path

from kubernetes import client

from hostenv.versions import release_for
from testbed.host import hostdeps, progress
from testbed.clusters.base import Cluster, ClusterError, ClusterSpec, ClusterStartError, ClusterStatus, port_is_free
from testbed.clusters.base import DriverPause, DriverRestart, DriverRoll, ImageLoading
from testbed.clusters import driver_daemonsets
from testbed.clusters.driver import DriverSpec
from testbed.clusters.features import feature_gates, runtime_config
from testbed.clusters.kind.driver import POLL_SECONDS, READY_TIMEOUT, KindDriver, kind_driver
from testbed.clusters.kind.early_deploy import EarlyDeploy
from testbed.clusters.kind.inotify import InotifyLimitError, ensure_limits
from testbed.clusters.kind.join_discovery import JoinDiscovery
from testbed.clusters.kind.join_discovery import prepare as prepare_join
from testbed.clusters.kind.kind_cli import run_kind
from testbed.clusters.kind.gpu_nodes import BASE_SPEC_IN_NODE, make_device_nodes, write_base_spec
from testbed.host.docker.dockerd import DockerError, docker, ensure_engine, stop_engine_if_idle
from testbed.clusters.kind.network import CNI_CONF_IN_NODE, POD_SUBNET, cni_config, pod_cidr, remove_kind_network_if_unused
from testbed.clusters.kind.images.node_storage import containerd_name, storage_mounts, unpack_images
from testbed.clusters.kind.images.worker_image import ensure_worker_image
from testbed.clusters.kind.nodes import (NVML_LIB_IN_NODE, NVML_STATE_IN_NODE, KindNode, Mount, gpu_minors, node_labels, nvml_library,
                                         provision_state)
from testbed.clusters.layout import Layout, check_size
from testbed.templates import render_template
from testbed.toolchain.resolve import ensure

NO_DRIVER_ENV = "DRA_TESTBED_KIND_NO_DRIVER"
KEEP_ON_FAILURE_ENV = "DRA_TESTBED_KEEP_FAILED"
# kind gives a new node container a fixed 30 s to reach systemd's multi-user target, then fails with this
SLOW_BOOT = "could not find a log line that matches"
CREATE_ATTEMPTS = 2
BACKOFF_RANGE = (1, 300)  # seconds the kubelet accepts for crashLoopBackOff.maxContainerRestartPeriod
MAX_WORKERS, MAX_GPUS = 8, 32  # a kubelet container each; beyond these only with --allow-large


class KindCluster(Cluster, DriverRestart, DriverRoll, DriverPause, ImageLoading):
    """A kind cluster: control plane + one worker per layout node. Abilities: the driver's DaemonSets restarted,
    rolled and paused through the API (testbed/clusters/driver_daemonsets.py); images loaded into the nodes."""

    backend = "kind"

    @property
    def kind_name(self) -> str:
        return self.name

    # -- tools ---------------------------------------------------------------------------------
    def _kind_binary(self, minor: str) -> Path:
        return ensure(minor, ["kind"]).path("kind")

    def _kind(self, kind: Path, *args: str, check: bool = True, timeout: float = 900) -> subprocess.CompletedProcess:
        # interrupted, kind's own `docker run`s still make their containers: run_kind lets them, so the teardown sees them
        out = run_kind(kind, list(args), dict(os.environ, KIND_EXPERIMENTAL_PROVIDER="docker"), timeout)
        if check and out.returncode != 0:
            log = self.home / "kind.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            with log.open("a") as sink:
                sink.write(f"$ kind {' '.join(args)}\n{out.stdout}{out.stderr}\n")
            last = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["no output"]
            raise ClusterError(f"kind {args[0]} {args[1] if len(args) > 1 else ''} failed: {last[0]} (log: {log})")
        return out

    def _remove_containers(self, timeout: float = 60.0) -> None:
        """`docker rm -f` every node container until none is listed (a removal can fail while docker still
        starts that container)."""
        deadline = time.monotonic() + timeout
        while (names := self.node_containers()) and time.monotonic() < deadline:
            for name in names:
                docker("rm", "-f", "-v", name, check=False)
            time.sleep(0.5)

    def node_containers(self) -> list[str]:
        """Names of this cluster's node containers (kind labels them with the cluster name)."""
        try:
            out = docker("ps", "-a", "--filter", f"label=io.x-k8s.kind.cluster={self.kind_name}", "--format", "{{.Names}}", check=False)
        except DockerError:
            return []
        return sorted(line for line in out.stdout.split() if line)

    # -- interface -----------------------------------------------------------------------------
    def exists(self) -> bool:
        return self.home.exists() or bool(self.node_containers())

    def plan_nodes(self, layout: Layout, base_spec: Path | None = None, join: JoinDiscovery | None = None) -> list[KindNode]:
        """Control plane plus one worker per layout node, with state dirs and CNI configs to mount; GPU
        workers also get `base_spec` as their containerd's base OCI spec (gpu_nodes.py), and with `join`
        the control plane its CA and the workers their discovery file (join_discovery.py)."""
        nodes = [KindNode("control-plane", 0)]
        nodes += [KindNode("worker", i + 1, layout=n, labels=node_labels(n)) for i, n in enumerate(layout.nodes)]
        storage = storage_mounts(self.home)
        for node in nodes:
            node.mounts += storage
            if join is not None:
                node.mounts += join.control_plane_mounts() if node.role == "control-plane" else join.worker_mounts()
            folder = self.home / "nodes" / (node.layout.name if node.layout else "control-plane")
            folder.mkdir(parents=True, exist_ok=True)
            cni = folder / "cni.conflist"
            cni.write_text(json.dumps(cni_config(node.index), indent=2) + "\n")
            node.mounts.append(Mount(str(cni), CNI_CONF_IN_NODE, readonly=True))
            if node.layout:
                state = folder / "nvml"
                provision_state(state, node.layout)
                node.mounts.append(Mount(str(state), NVML_STATE_IN_NODE))
                node.mounts.append(Mount(str(nvml_library()), NVML_LIB_IN_NODE, readonly=True))
                if base_spec is not None:
                    node.mounts.append(Mount(str(base_spec), BASE_SPEC_IN_NODE, readonly=True))
        return nodes

    def render_config(self, spec: ClusterSpec, nodes: list[KindNode], image: str, join: JoinDiscovery | None = None,
                      worker_image: str | None = None) -> Path:
        """kind.yaml of `nodes` booting from `image`, the workers from `worker_image` when given."""
        path = self.home / "kind.yaml"
        path.write_text(render_template(
            "kind.yaml.j2", cluster_name=self.kind_name, feature_gates=feature_gates(spec.k8s),
            runtime_config=runtime_config(spec.k8s), apiserver_port=spec.apiserver_port,
            pod_subnet=POD_SUBNET, restart_backoff_max=_backoff(spec.restart_backoff_max),
            join_patches=join.kubeadm_patches() if join else [],
            nodes=[{"role": n.role, "labels": n.labels, "mounts": [asdict(m) for m in n.mounts],
                    "image": worker_image if worker_image and n.role == "worker" else image} for n in nodes],
        ))
        return path

    def create(self, spec: ClusterSpec, force: bool = False) -> Path:
        if spec.layout is None:
            raise ClusterError("no layout: give --layout FILE or --node NAME=BOARD:COUNT:MODE")
        check_size(spec.layout, "kind", MAX_WORKERS, MAX_GPUS, spec.allow_large)  # each worker is a container
        _backoff(spec.restart_backoff_max)  # refused before anything starts
        release = release_for(spec.k8s)
        driver = kind_driver(spec.driver)  # refuses a driver kind cannot run before anything starts
        try:
            for raised in ensure_limits():  # kind's workers do not join when they are low
                progress.note(f"raised fs.inotify.{raised.name} from {raised.old} to {raised.new} machine-wide (kind's workers need it)")
        except InotifyLimitError as exc:
            raise ClusterError(str(exc)) from exc
        try:
            hostdeps.prefetch("kind")  # everything a first kind run needs, in one apt-get run
            ensure_engine()
        except (DockerError, hostdeps.HostDepsMissing) as exc:
            raise ClusterError(str(exc)) from exc
        driver.preflight()  # e.g. an image that is not in the engine: refused before any container exists
        if self.exists():
            if not force:
                raise ClusterError(f"a kind cluster named {self.name!r} already exists; use another --name, "
                                   f"`dra-testbed down --backend kind --name {self.name}`, or --force to replace it")
            progress.note(f"replacing the existing kind cluster {self.name!r} (--force)")
            self._remove()
        if spec.apiserver_port and not port_is_free(spec.apiserver_port):
            raise ClusterError(f"port {spec.apiserver_port} is busy; choose a free --port or leave it out for a random one")
        kind = self._kind_binary(release.minor)
        from testbed.clusters.kind.images.node_image import ImageBuildError, ensure_node_image

        try:
            image = ensure_node_image(release.minor).reference
        except ImageBuildError as exc:
            raise ClusterError(str(exc)) from exc
        driver_image = None if os.environ.get(NO_DRIVER_ENV) else driver.image(release.minor)
        worker_image = self._worker_image(image, driver_image)
        self.home.mkdir(parents=True, exist_ok=True)
        join = prepare_join(self.home, self.kind_name)
        nodes = self.plan_nodes(spec.layout, write_base_spec(image, self.home / "cri-base.json"), join)
        config = self.render_config(spec, nodes, image, join, worker_image=worker_image)
        kubeconfig = self.home / "kubeconfig"
        # recorded before kind runs: kubectl (the early deploy's) and the teardown of a failed create read it
        self.record_spec(spec, release.kubernetes, image=image, kind=str(kind),
                         nodes={self.node_name(n): (n.layout.name if n.layout else "control-plane") for n in nodes})
        def start_early() -> EarlyDeploy | None:
            if os.environ.get(NO_DRIVER_ENV):
                return None
            return self._start_early_deploy(driver, spec.layout, release.minor, nodes, driver_image)

        try:
            early = self._create_nodes(kind, image, config, kubeconfig, len(nodes), start_early)
            kubeconfig.chmod(0o600)
            with progress.step("routing pod subnets between nodes"):
                self.add_routes()
            with progress.step("waiting for every node to be Ready"):
                self.wait_ready(len(nodes))
            if early and early.applied:
                progress.note(f"driver applied while the workers joined ({early.seconds:.1f}s after kind started)")
            elif early and early.error:
                progress.note(f"[yellow]applying the driver early failed ({early.error}); it is deployed now[/yellow]")
            if not (early and early.nodes_prepared):
                self._make_device_nodes(nodes)
            if not os.environ.get(NO_DRIVER_ENV):
                driver.deploy(self, spec.layout, release.minor)
            return kubeconfig
        except BaseException as exc:
            progress.note(f"[red]kind up failed ({exc}); collecting logs[/red]")
            self.export_logs(kind=kind)
            if os.environ.get(KEEP_ON_FAILURE_ENV):
                progress.note(f"[yellow]keeping the failed cluster ({KEEP_ON_FAILURE_ENV} is set)[/yellow]")
            else:
                self._teardown(kind)  # the logs are outside the home: nothing left that looks like a cluster
            if isinstance(exc, ClusterError) and not isinstance(exc, ClusterStartError):
                raise ClusterStartError(str(exc)) from exc
            raise

    def _make_device_nodes(self, nodes: list[KindNode]) -> None:
        for node in nodes:
            if node.layout:
                make_device_nodes(self.node_name(node), gpu_minors(self.home / "nodes" / node.layout.name / "nvml"))

    def _start_early_deploy(self, driver: KindDriver, layout: Layout, minor: str, nodes: list[KindNode],
                            image: str | None) -> EarlyDeploy | None:
        """Deploy the driver as soon as the API server answers, while kind joins the workers, and unpack its
        image (`image`) in each GPU worker once it boots (early_deploy.py)."""
        if not driver.early_apply:
            return None
        unpackers = [lambda worker=self.node_name(n): unpack_images(worker, [image] if image else []) for n in nodes if n.layout]
        return EarlyDeploy(self.node_name(nodes[0]), self.home / "kubeconfig.early", unpackers, lambda: self._make_device_nodes(nodes),
                           lambda kubeconfig: driver.apply(self, layout, minor, kubeconfig))

    @staticmethod
    def _worker_image(node_image: str, driver_image: str | None) -> str:
        """The image the workers boot from: the node image with the driver's image inside (worker_image.py)."""
        if not driver_image:
            return node_image
        try:
            return ensure_worker_image(node_image, [driver_image])
        except DockerError as exc:
            raise ClusterError(f"could not build the workers' image: {exc}") from exc

    def _create_nodes(self, kind: Path, image: str, config: Path, kubeconfig: Path, count: int,
                      start_early: Callable[[], EarlyDeploy | None]) -> EarlyDeploy | None:
        """`kind create cluster`, tried once more when a node's systemd missed kind's fixed 30 s to boot (seen
        at load 60: "could not find a log line that matches ... Multi-User System"), after removing what it made.
        Each attempt has an early deploy of its own (`start_early`; its nodes are new); returns the last one's."""
        for attempt in range(1, CREATE_ATTEMPTS + 1):
            early = start_early()
            try:
                with progress.step(f"kind create cluster {self.kind_name} ({count} nodes, {image})"):
                    # each node's image is in the config: kind's --image would override the workers' (worker_image.py);
                    # no --wait (the control plane Ready): wait_ready waits for every node after
                    self._kind(kind, "create", "cluster", "--name", self.kind_name, "--config", str(config),
                               "--kubeconfig", str(kubeconfig), "--retain", timeout=READY_TIMEOUT + 300)
                return early
            except ClusterError as exc:
                if attempt == CREATE_ATTEMPTS or SLOW_BOOT not in str(exc):
                    raise
                progress.note(f"[yellow]a node booted slower than kind waits for (a loaded machine); removing it and "
                              f"trying again ({attempt + 1} of {CREATE_ATTEMPTS})[/yellow]")
                self._kind(kind, "delete", "cluster", "--name", self.kind_name, "--kubeconfig", str(self.home / "kubeconfig.delete"),
                           check=False)
                self._remove_containers()
            finally:  # kind returned, failed or was interrupted: the deploy after it does whatever the early one did not
                if early:
                    early.finish()
                    early.kubeconfig.unlink(missing_ok=True)
        return None  # not reached: the last attempt returns or raises

    def node_name(self, node: KindNode) -> str:
        """kind's container (= Kubernetes node) name of a planned node."""
        if node.role == "control-plane":
            return f"{self.kind_name}-control-plane"
        return f"{self.kind_name}-worker" + ("" if node.index == 1 else str(node.index))

    def node_ips(self) -> dict[str, str]:
        """Node container name -> its address on kind's Docker network."""
        ips = {}
        for name in self.node_containers():
            out = docker("inspect", "--format", "{{range .NetworkSettings.Networks}}{{.IPAddress}} {{end}}", name)
            ips[name] = out.stdout.split()[0]
        return ips

    def add_routes(self) -> None:
        """On every node, a route to each other node's pod /24 through that node."""
        ips = self.node_ips()
        index_of = {name: i for i, name in enumerate(self._ordered_nodes())}
        for name in ips:
            for other, ip in ips.items():
                if other != name and other in index_of:
                    docker("exec", name, "ip", "route", "replace", pod_cidr(index_of[other]), "via", ip)

    def _ordered_nodes(self) -> list[str]:
        """Node names in plan order (index 0 = control plane), from the rendered config's node count."""
        workers = sum(1 for line in (self.home / "kind.yaml").read_text().splitlines() if line.strip() == "- role: worker")
        return [f"{self.kind_name}-control-plane"] + [f"{self.kind_name}-worker" + ("" if i == 1 else str(i)) for i in range(1, workers + 1)]

    def wait_ready(self, count: int, timeout: float = READY_TIMEOUT) -> None:
        """Every node Ready and the default service account present."""
        api = self.api_client()
        try:
            core = client.CoreV1Api(api)
            deadline = time.monotonic() + timeout
            while True:
                nodes = core.list_node().items
                ready = [n for n in nodes if any(c.type == "Ready" and c.status == "True" for c in (n.status.conditions or []))]
                if len(ready) >= count and core.list_namespaced_service_account("default").items:
                    return
                if time.monotonic() > deadline:
                    raise ClusterError(f"{len(ready)} of {count} nodes Ready after {timeout:.0f}s")
                time.sleep(POLL_SECONDS)
        finally:
            api.close()

    def deploy_driver(self, driver: DriverSpec) -> None:
        """Deploy `driver` on the GPU workers (replacing the one running) and wait for its slices."""
        kind_driver(driver).deploy(self, self.saved_layout(), self.saved_minor())
        self.record_driver(driver)

    def kubectl(self, *args: str, check: bool = True, timeout: float = 120, kubeconfig: Path | None = None) -> subprocess.CompletedProcess:
        """kubectl of the cluster's minor against this cluster (through `kubeconfig` when given)."""
        kubectl = ensure(self.saved_minor(), ["kubectl"]).path("kubectl")
        out = subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig or self.home / "kubeconfig"), *args],
                             capture_output=True, text=True, timeout=timeout)
        if check and out.returncode != 0:
            raise ClusterError(f"kubectl {' '.join(args[:2])} failed: {(out.stderr or out.stdout).strip()[-300:]}")
        return out

    def load_images(self, *references: str, workers_only: bool = False) -> None:
        """Copy local Docker images into every node's containerd (pods use them with pull policy Never)."""
        record = self.saved_spec() or {}
        kind = Path(record.get("kind") or self._kind_binary(self.saved_minor()))
        nodes = [n for n in self.node_containers() if not (workers_only and n.endswith("-control-plane"))]
        missing = [ref for ref in references if not all(self._node_has_image(n, ref) for n in nodes)]
        if not missing:
            return
        references = tuple(missing)
        with progress.step(f"loading {len(references)} image(s) into the nodes"):
            self._kind(kind, "load", "docker-image", "--name", self.kind_name, *(["--nodes", ",".join(nodes)] if nodes else []), *references)

    @staticmethod
    def _node_has_image(node: str, reference: str) -> bool:
        """Whether the node's containerd holds `reference` (as kind loads it: docker.io/ prefixed)."""
        out = docker("exec", node, "ctr", "-n", "k8s.io", "images", "ls", "-q", f"name=={containerd_name(reference)}", check=False)
        return out.returncode == 0 and bool(out.stdout.strip())

    def export_logs(self, folder: Path | None = None, kind: Path | None = None) -> Path:
        """`kind export logs` and a cluster dump into `folder` (default: a new logs_folder(), outside the home so
        the logs outlive the cluster); returns the folder."""
        folder = folder or self.logs_folder()
        folder.mkdir(parents=True, exist_ok=True)
        try:
            kind = kind or self._kind_binary(self.saved_minor())
            self._kind(kind, "export", "logs", str(folder / "kind-logs"), "--name", self.kind_name, check=False, timeout=300)
        except Exception as exc:  # noqa: BLE001 - log collection must never mask the real failure
            (folder / "export-error.txt").write_text(str(exc))
        kubeconfig = self.home / "kubeconfig"
        if kubeconfig.is_file():
            try:
                kubectl = ensure(self.saved_minor(), ["kubectl"]).path("kubectl")
                with (folder / "cluster-dump.txt").open("w") as sink:
                    subprocess.run([str(kubectl), "--kubeconfig", str(kubeconfig), "cluster-info", "dump", "--all-namespaces"],
                                   stdout=sink, stderr=subprocess.STDOUT, timeout=120)
            except Exception as exc:  # noqa: BLE001
                (folder / "dump-error.txt").write_text(str(exc))
        progress.note(f"logs of kind cluster {self.name}: {folder}")
        return folder

    def delete(self) -> None:
        """Remove the cluster; a dockerd dra-testbed started goes too once no container is left on it."""
        self._remove()
        stop_engine_if_idle()

    def _remove(self) -> None:
        record = self.saved_spec() or {}
        kind = Path(record["kind"]) if record.get("kind") and Path(record["kind"]).is_file() else None
        self._teardown(kind)

    def _teardown(self, kind: Path | None) -> None:
        """Delete the node containers (through kind when possible), kind's network when unused, our files."""
        if self.node_containers():
            if kind is None:
                try:
                    kind = self._kind_binary(self.saved_minor())
                except Exception:  # noqa: BLE001 - fall back to removing containers directly
                    kind = None
            if kind is not None:
                try:
                    self._kind(kind, "delete", "cluster", "--name", self.kind_name, "--kubeconfig", str(self.home / "kubeconfig.delete"), check=False)
                except Exception:  # noqa: BLE001 - a kind that fails or hangs on a half-made cluster: its containers go directly
                    pass
            self._remove_containers()
        remove_kind_network_if_unused()
        shutil.rmtree(self.home, ignore_errors=True)

    # -- abilities (testbed/clusters/base.py), through the API with a client that retries what a loaded
    # control plane drops, so that only the driver's own answers show
    @contextmanager
    def _driver_api(self) -> Iterator[client.ApiClient]:
        from testbed.kube.apiretry import retrying_client

        api = retrying_client(str(self.kubeconfig()))
        try:
            yield api
        finally:
            api.close()

    def restart_driver(self) -> None:
        """Every driver pod deleted at once (grace 0, as a crash), back once their successors are ready."""
        with self._driver_api() as api:
            driver_daemonsets.restart_pods(api)

    def roll_driver(self) -> None:
        with self._driver_api() as api:
            driver_daemonsets.roll_out(api)

    @contextmanager
    def driver_paused(self) -> Iterator[None]:
        with self._driver_api() as api, driver_daemonsets.paused(api):
            yield

    def status(self) -> ClusterStatus:
        if not self.exists():
            return ClusterStatus(self.name, self.backend, False, None, detail="no such cluster")
        kubeconfig = self.home / "kubeconfig"
        containers = self.node_containers()
        try:
            version, nodes, slices = self.api_summary()
        except Exception as exc:  # noqa: BLE001 - any failure to talk means "not running"
            return ClusterStatus(self.name, self.backend, False, kubeconfig if kubeconfig.exists() else None,
                                 detail=f"apiserver unreachable ({type(exc).__name__}); node containers: {', '.join(containers) or 'none'}")
        return ClusterStatus(self.name, self.backend, True, kubeconfig, version, nodes, slices,
                             detail=f"node containers: {', '.join(containers)}")


def _backoff(seconds: float | None) -> int | None:
    """The kubelets' crash-loop back-off cap as whole seconds, None for the kubelet's default."""
    if seconds is None:
        return None
    lo, hi = BACKOFF_RANGE
    if not lo <= seconds <= hi or seconds != int(seconds):
        raise ClusterError(f"restart back-off cap {seconds!r}: the kubelet takes whole seconds from {lo} to {hi}")
    return int(seconds)
