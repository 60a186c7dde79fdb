"""KWOK backend: a real etcd, apiserver, controller-manager and scheduler run by kwokctl's binary
runtime from local binaries, with simulated GPU nodes and their ResourceSlices."""

from __future__ import annotations

import os
import shutil
import subprocess
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Callable

import yaml
from filelock import FileLock

from fake_gpus.driver.paging import pages
from fake_gpus.driver import rest
from fake_gpus.driver.client_modules import preload_api_modules
from hostenv.dirs import state_root
from hostenv.processes import alive, run_group, started_from, terminate
from hostenv.versions import release_for
from testbed.host import progress
from testbed.clusters.base import FAILURE_LOGS_ENV, Cluster, ClusterError, ClusterSpec, ClusterStartError, ClusterStatus, port_is_free
from testbed.clusters.base import DriverRestart, DriverRoll, NodeControl
from testbed.clusters.driver import DriverSpec
from testbed.clusters.driver_identity import apply_identity
from testbed.clusters.features import as_flag, feature_gates, runtime_config
from testbed.clusters.kwok.driver import kwok_driver, stop_every_driver
from testbed.clusters.kwok.driver import KwokDriver
from testbed.clusters.kwok.nodes import node_object
from testbed.clusters.kwok.ports import component_ports
from testbed.clusters.kwok.stages import StagesError, stages_yaml
from testbed.clusters.kwok.tuning import component_patches
from testbed.clusters.layout import Layout, NodeSpec, check_layout, check_size
from testbed.templates import render_template
from testbed.toolchain.resolve import ensure

if TYPE_CHECKING:
    from kubernetes import client

BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "etcd", "kwok", "kwokctl", "kubectl")
READY_TIMEOUT = 180.0
MAX_NODES, MAX_GPUS = 256, 1024  # beyond these only with --allow-large (ClusterSpec.allow_large)


def kwok_workdir() -> Path:
    """KWOK_WORKDIR for every kwokctl call of ours, so we never touch ~/.kwok or ~/.kube/config."""
    return state_root() / "kwok"


class KwokCluster(Cluster, NodeControl, DriverRestart, DriverRoll):
    """A cluster of simulated GPU nodes on a real control plane. Abilities: nodes join and leave through the
    API, the driver restarts (deploy_driver) and rolls (KwokFleet.roll_to) where the driver follows that."""

    backend = "kwok"

    def _kwokctl(self, kwokctl: Path, *args: str, check: bool = True, timeout: float = 300) -> subprocess.CompletedProcess:
        env = dict(os.environ, KWOK_WORKDIR=str(kwok_workdir()))
        out = run_group([str(kwokctl), *args, "--name", self.name], env=env, timeout=timeout)
        if check and out.returncode != 0:
            log = self.home / "kwokctl.log"
            log.parent.mkdir(parents=True, exist_ok=True)
            log.write_text(out.stdout + out.stderr)
            last = (out.stderr.strip() or out.stdout.strip()).splitlines()[-1:] or ["no output"]
            verb = " ".join(a for a in args[:4] if not a.startswith("-") and "/" not in a)
            raise ClusterError(f"kwokctl {verb} failed: {last[0]} (log: {log})")
        return out

    @property
    def kwok_dir(self) -> Path:
        """kwokctl's own directory for this cluster (pids, logs, configs)."""
        return kwok_workdir() / "clusters" / self.name

    def exists(self) -> bool:
        return self.home.exists() or self.kwok_dir.exists()

    def pids(self) -> dict[str, int]:
        """Process ids kwokctl recorded for this cluster's components."""
        found = {}
        for pid_file in (self.kwok_dir / "pids").glob("*.pid"):
            try:
                found[pid_file.stem] = int(pid_file.read_text().strip())
            except (OSError, ValueError):
                continue
        return found

    def ports(self) -> list[int]:
        """TCP ports this cluster's components listen on, as kwokctl configured them."""
        try:
            docs = list(yaml.safe_load_all((self.kwok_dir / "kwok.yaml").read_text()))
        except (OSError, yaml.YAMLError):
            return []
        for doc in docs:
            if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration":
                opts = doc.get("options") or {}
                return sorted({v for k, v in opts.items() if k.endswith("Port") and type(v) is int and v > 0})
        return []

    def create(self, spec: ClusterSpec, force: bool = False) -> Path:
        if spec.layout is None:
            raise ClusterError("no layout: give --layout FILE or --node NAME=BOARD:COUNT:MODE")
        check_layout(spec.layout)
        check_size(spec.layout, "kwok", MAX_NODES, MAX_GPUS, spec.allow_large)
        release = release_for(spec.k8s)
        driver = kwok_driver(spec.driver)  # refuses a driver KWOK cannot run before anything starts
        try:
            stages = stages_yaml(release.kwok)
        except StagesError as exc:
            raise ClusterError(str(exc)) from exc
        if self.exists():
            if not force:
                raise ClusterError(
                    f"a kwok cluster named {self.name!r} already exists; use another --name, "
                    f"`dra-testbed down --name {self.name}`, or --force to replace it"
                )
            progress.note(f"replacing the existing cluster {self.name!r} (--force)")
            self.delete()
        if spec.apiserver_port and not port_is_free(spec.apiserver_port):
            raise ClusterError(f"port {spec.apiserver_port} is busy; choose a free --port or leave it out for a random one")
        toolchain = ensure(release.minor, BINARIES, overrides=spec.binaries)
        self.home.mkdir(parents=True, exist_ok=True)
        try:
            # the driver starts first and waits for the kubeconfig: its start-up overlaps the control plane's
            driver.spawn(self.home, self.home / "kubeconfig", spec.layout)
            threading.Thread(target=preload_api_modules, daemon=True).start()  # while kwokctl works
            with progress.step(f"starting kwok cluster {self.name} (Kubernetes {release.kubernetes})"):
                kubeconfig = self._start_control_plane(toolchain, spec, stages)
            with progress.step(f"adding {len(spec.layout.nodes)} GPU nodes and their ResourceSlices") as step:
                api = self.api_client()
                try:
                    apply_identity(api)  # before any node: the publisher requests each node's token as it sees it
                    self.add_nodes(api, spec.layout, step.update)
                    driver.wait(self.home)
                    self.wait_schedulable(api, spec.layout, report=step.update)
                finally:
                    api.close()
            self.record_spec(spec, release.kubernetes, binaries={b.name: str(b.path) for b in toolchain.binaries.values()})
            return kubeconfig
        except BaseException as failure:
            try:  # keeping the logs must never keep the cluster: the teardown below runs whatever happens here
                kept = self.export_logs() if os.environ.get(FAILURE_LOGS_ENV) else None
                where = f" (component logs kept in {kept})" if kept else f" (set ${FAILURE_LOGS_ENV} to keep component logs)"
            except (OSError, shutil.Error) as exc:
                where = f" (keeping its logs failed: {str(exc)[:200]})"
            progress.note(f"[red]up failed; removing the partial cluster {self.name!r}{where}[/red]")
            self._teardown(toolchain.path("kwokctl"))
            if isinstance(failure, ClusterError) and not isinstance(failure, ClusterStartError):
                raise ClusterStartError(str(failure)) from failure
            raise

    def export_logs(self, folder: Path | None = None) -> Path:
        """Copy the components' logs (kwokctl's) and the cluster's home (publisher log, configs) to `folder`;
        a failed `up` keeps them in $DRA_TESTBED_FAILURE_LOGS this way before removing the cluster."""
        dest = folder or self.logs_folder()  # not beside the homes, where it would count as a cluster
        for source, name in ((self.kwok_dir / "logs", "logs"), (self.home, "home")):
            if source.is_dir():
                # links as links (a node's sys views link in loops), no sockets or device nodes (not copyable)
                shutil.copytree(source, dest / name, dirs_exist_ok=True, symlinks=True, ignore=shutil.ignore_patterns("*.sock", "dev"))
        return dest

    def load_images(self, *references: str) -> None:
        raise ClusterError("KWOK nodes run no containers, so images cannot be loaded into them; use --backend kind")

    def deploy_driver(self, driver: DriverSpec) -> None:
        """Stop the running driver, start `driver` on the same nodes and hardware state, wait for its slices."""
        replacement = kwok_driver(driver)
        kubeconfig, layout = self.kubeconfig(), self.saved_layout()
        self._stop_drivers()
        replacement.spawn(self.home, kubeconfig, layout)
        replacement.wait(self.home)
        self.record_driver(driver)

    def _stop_drivers(self) -> None:
        """Stop whichever driver runs (each kind's stop is a no-op when it does not)."""
        stop_every_driver(self.home)

    def _start_control_plane(self, toolchain, spec: ClusterSpec, stages: str) -> Path:
        """Start the components and return the kubeconfig once the apiserver is healthy."""
        release = release_for(spec.k8s)
        config = self.home / "kwokctl.yaml"
        config.write_text(render_template(
            "kwokctl.yaml.j2",
            kube_version=release.kubernetes.removeprefix("v"),
            etcd_version=release.etcd.removeprefix("v"),
            binaries={b.name: str(b.path) for b in toolchain.binaries.values()},
            feature_gates=as_flag(feature_gates(spec.k8s)),
            runtime_config=as_flag(runtime_config(spec.k8s)),
            ports=component_ports(spec.apiserver_port),
            stages=stages,
            patches=component_patches(spec.allow_large, feature_gates(spec.k8s)),
            scheduler_config=spec.scheduler_config,
        ))
        # kwokctl picks "random" free ports by probing, so two creations at once can pick the same ones and
        # both hang; one creation at a time per machine (a few seconds each) rules that out.
        kwok_workdir().mkdir(parents=True, exist_ok=True)
        with FileLock(str(kwok_workdir() / ".create.lock")):
            # No --wait: kwokctl would poll /healthz every 0.5 s through a kubectl process of its own; the
            # kubeconfig it writes (before the components start) lets us poll it directly instead.
            self._kwokctl(toolchain.path("kwokctl"), "--config", str(config), "create", "cluster",
                          "--kubeconfig", str(self._contexts()), timeout=READY_TIMEOUT + 60)
            kubeconfig = self._write_kubeconfig()
            api = self.api_client()
            try:
                self._wait_healthy(api)
            finally:
                api.close()
            self._restart_exited(toolchain.path("kwokctl"))
        return kubeconfig

    def _restart_exited(self, kwokctl: Path) -> None:
        """Start again, once, a component that gave up before the apiserver was healthy: the controller-manager
        and scheduler exit when /healthz fails for 20 s, which a loaded machine's apiserver start can take."""
        dead = sorted(name for name, pid in self.pids().items() if not alive(pid))
        if dead:
            progress.note(f"{', '.join(dead)} exited while the apiserver started; starting again")
            self._kwokctl(kwokctl, "start", "cluster")

    def _contexts(self) -> Path:
        """The kubeconfig kwokctl adds its context to (never ~/.kube/config)."""
        return self.home / "kwokctl-contexts.yaml"

    def _wait_healthy(self, api: client.ApiClient, timeout: float = READY_TIMEOUT) -> None:
        """Until the apiserver's /healthz says ok (kwokctl's own readiness test), polled every 50 ms."""
        url = f"{api.configuration.host}/healthz"
        deadline = time.monotonic() + timeout
        while True:
            try:
                if api.rest_client.pool_manager.request("GET", url, timeout=2.0, retries=False).data == b"ok":
                    return
            except Exception:  # noqa: BLE001 - not listening yet
                pass
            if time.monotonic() > deadline:
                dead = sorted(name for name, pid in self.pids().items() if not alive(pid))
                raise ClusterError(f"kube-apiserver not healthy after {timeout:.0f}s"
                                   f"{f'; components exited: {dead}' if dead else ''} (logs: {self.kwok_dir / 'logs'})")
            time.sleep(0.05)

    def _write_kubeconfig(self) -> Path:
        path = self.home / "kubeconfig"
        partial = path.with_suffix(".partial")  # the waiting publisher must never read half a file
        partial.write_text(self._contexts().read_text())
        partial.chmod(0o600)
        partial.replace(path)
        return path

    def add_nodes(self, api: client.ApiClient, layout: Layout, report: Callable[[str], None] | None = None) -> None:
        """Create the layout's Node objects (the KWOK controller then keeps them Ready); `report` hears how far."""
        for done, node in enumerate(layout.nodes):
            if report and done % 10 == 0:
                report(f"{done}/{len(layout.nodes)} nodes created")
            rest.create(api, "/api/v1/nodes", node_object(node), exist_ok=True)

    def wait_schedulable(self, api: client.ApiClient, layout: Layout, timeout: float = READY_TIMEOUT,
                         report: Callable[[str], None] | None = None) -> None:
        """Wait until every layout node is Ready and has its slice, and the default service account exists."""
        list_nodes, list_slices = rest.lister(api, "/api/v1/nodes"), rest.lister(api, "/apis/resource.k8s.io/v1/resourceslices")
        deadline = time.monotonic() + timeout
        wanted = {n.name for n in layout.nodes}
        while True:
            checked = time.monotonic()
            # undecoded and paged: decoding a large fleet's nodes and slices into objects takes seconds each
            ready = {n["metadata"]["name"] for n in pages(list_nodes)
                     if any(c["type"] == "Ready" and c["status"] == "True" for c in (n.get("status") or {}).get("conditions") or [])}
            sliced = {s["spec"].get("nodeName") for s in pages(list_slices)}
            accounts = rest.request(api, "GET", "/api/v1/namespaces/default/serviceaccounts", limit=1)["items"]
            if wanted <= ready and wanted <= sliced and accounts:
                return
            if report:
                report(f"{len(wanted & ready)}/{len(wanted)} nodes Ready, {len(wanted & sliced)} with ResourceSlices")
            if time.monotonic() > deadline:
                dead = sorted(name for name, pid in self.pids().items() if not alive(pid))
                raise ClusterError(f"nodes not schedulable after {timeout:.0f}s: ready {sorted(ready)}, with slices "
                                   f"{sorted(sliced)}, default service account {'present' if accounts else 'missing'}"
                                   f"{f', components exited: {dead}' if dead else ''}")
            time.sleep(max(0.1, time.monotonic() - checked))  # a large fleet's check is not run back to back

    def delete(self) -> None:
        kwokctl = self._kwokctl_path()
        self._teardown(kwokctl)

    def _kwokctl_path(self) -> Path | None:
        record = self.saved_spec()
        if record and Path(record["binaries"].get("kwokctl", "")).is_file():
            return Path(record["binaries"]["kwokctl"])
        try:
            return ensure(self.saved_minor(), ["kwokctl"], allow_build=False).path("kwokctl")
        except Exception:  # noqa: BLE001 - teardown falls back to killing recorded processes
            return None

    def _teardown(self, kwokctl: Path | None) -> None:
        """Stop every component, then remove kwokctl's and our directories; kill what kwokctl missed."""
        # each step runs even when one before it failed: a half-made cluster (an interrupted `up`) may lack
        # what a step expects, and whatever did start must still go; the first failure is raised at the end
        failures: list[BaseException] = []
        try:
            self._stop_drivers()  # first, so it does not write to a control plane going away
        except Exception as exc:  # noqa: BLE001 - raised below, once the rest is down
            failures.append(exc)
        pids = self.pids()
        if kwokctl is not None and self.kwok_dir.exists():
            # kwokctl refuses an empty --kubeconfig on delete; give it a throwaway file, never ~/.kube/config
            self.home.mkdir(parents=True, exist_ok=True)
            try:
                self._kwokctl(kwokctl, "delete", "cluster", "--kubeconfig", str(self._contexts()), check=False)
            except Exception as exc:  # noqa: BLE001 - e.g. a hung kwokctl past its timeout: the kills below still run
                failures.append(exc)
        for pid in pids.values():
            terminate(pid)
        # a kwokctl killed half-way may have started components it never recorded: they run from its bin/
        for pid in started_from(str(self.kwok_dir / "bin")):
            terminate(pid)
        shutil.rmtree(self.kwok_dir, ignore_errors=True)
        shutil.rmtree(self.home, ignore_errors=True)
        if failures:
            raise failures[0]

    def status(self) -> ClusterStatus:
        if not self.exists():
            return ClusterStatus(self.name, self.backend, False, None, detail="no such cluster")
        kubeconfig = self.home / "kubeconfig"
        running = {name: pid for name, pid in self.pids().items() if alive(pid)}
        try:
            version, nodes, slices = self.api_summary()
        except Exception as exc:  # noqa: BLE001 - any failure to talk means "not running"
            return ClusterStatus(self.name, self.backend, False, kubeconfig if kubeconfig.exists() else None,
                                 detail=f"apiserver unreachable ({type(exc).__name__}); live components: {', '.join(sorted(running)) or 'none'}")
        return ClusterStatus(self.name, self.backend, True, kubeconfig, version, nodes, slices,
                             detail=f"components: {', '.join(sorted(running))}")

    # -- abilities (testbed/clusters/base.py) -------------------------------------------------------
    def _running_driver(self) -> DriverSpec:
        return DriverSpec.from_dict((self.saved_spec() or {}).get("driver") or {})

    @staticmethod
    def follows_nodes(driver: DriverSpec) -> bool:
        """Whether `driver` on KWOK serves nodes that join after `up` (ours: one publisher for every node the API
        has); a vendor's binary serves the nodes it started with."""
        return type(kwok_driver(driver)).join is not KwokDriver.join

    def offers(self, ability: type) -> bool:
        """Node changes and rolls only with a driver whose KWOK implementation follows them."""
        if ability is NodeControl:
            return self.follows_nodes(self._running_driver())
        if ability is DriverRoll:
            return type(kwok_driver(self._running_driver())).roll is not KwokDriver.roll
        return True

    def add_node(self, node: NodeSpec) -> None:
        """The Node registers through the API and the publisher serves it from there; no layout change is
        recorded and the stand-in kubelet gets no plugin for it (KwokFleet.add is a machine joining with both)."""
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        from testbed.kube.apiretry import retrying_client

        api = retrying_client(str(self.kubeconfig()))
        try:
            k8s.CoreV1Api(api).create_node(body=node_object(node))
        except ApiException as exc:
            if exc.status != 409:
                raise
        finally:
            api.close()

    def remove_node(self, name: str) -> None:
        from kubernetes import client as k8s
        from kubernetes.client.exceptions import ApiException

        from testbed.kube.apiretry import retrying_client

        api = retrying_client(str(self.kubeconfig()))
        try:
            k8s.CoreV1Api(api).delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
        finally:
            api.close()

    def restart_driver(self) -> None:
        """The running driver stopped and started again with the same spec (deploy_driver)."""
        self.deploy_driver(self._running_driver())

    def roll_driver(self) -> None:
        """A new generation of the running driver, node by node (KwokFleet.roll_to its own spec)."""
        from testbed.clusters.kwok.fleet import KwokFleet

        api = self.api_client()
        try:
            KwokFleet(self, api).roll_to(self._running_driver())
        finally:
            api.close()
