"""The stand-in kubelet as a process: one StandInKubelet per KWOK node, driven by a watch on Pods.

For each pod bound to one of its nodes and using ResourceClaims it prepares the claims (as the kubelet
does before starting containers) and then marks the pod with PREPARED_ANNOTATION; a failed prepare
gives the pod a Warning event `FailedPrepareDynamicResources` with the plugin's message (the kubelet's
reason) and is retried with exponential backoff (1 s doubling to 30 s). A pod that is deleted or
finishes has its claims unprepared (kept until no pod of the node uses them); an unprepare that fails
(the plugin is down) is retried every round until it succeeds. A plugin that is not up yet is
registered as soon as its registration socket answers, and again whenever it makes that socket anew
(a restarted plugin). A cut watch or a refused list (the apiserver restarts) is followed by a new list. A node with an on-demand plugin
(testbed.kubelet.process.OnDemand) has it started when its first claim-holding pod arrives, and again at
once whenever it exits (the stand-in is its supervisor); its pods wait for it without an event for START_GRACE seconds.
On-demand nodes are the files of the plugins directory, read every round: a new file is a node that joined,
a file gone is a node that left (its plugin stopped, the node forgotten), a rewritten one (a driver update, a
mode switch) has its plugin replaced by one started from the file, at once if the old one ran; the node's
kubelet keeps what it had prepared, as a real kubelet does across a plugin's update.
On 1.36 and later (the apiserver serves allocatedResourcesStatus) it follows each own-process plugin's health
stream and writes the health of the devices of its nodes' prepared pods into their container statuses, as the
kubelet does (testbed.kubelet.health).
"""

from __future__ import annotations

import datetime
import subprocess
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from hostenv.processes import terminate
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.kubelet.plugin_host import Hosts, HostedStarter
from testbed.kubelet.mps_pods import MpsPods
from testbed.kubelet.process import OnDemand
from fake_gpus.driver.slices import server_minor
from testbed.kubelet.health import container_statuses, differs, writes_health
from testbed.kubelet.standin import PrepareError, StandInKubelet, holds_claims

FAILED_REASON = "FailedPrepareDynamicResources"  # the kubelet's event reason for a failed prepare
BACKOFF_START, BACKOFF_MAX = 1.0, 30.0
START_GRACE = 60.0  # seconds an on-demand plugin may take to register (Python start-up on a loaded machine)


@dataclass
class _Starter:
    """An on-demand plugin of one node."""

    how: OnDemand
    pid_file: Path
    proc: subprocess.Popen | None = None
    since: float = 0.0

    def starting(self) -> bool:
        """Start the plugin unless it runs; True while it is still within START_GRACE of its start."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = self.how.start(self.pid_file)
            self.since = time.monotonic()
        return time.monotonic() - self.since < START_GRACE

    def running(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def exited(self) -> bool:
        """It was started and has exited since (killed): to be started again."""
        return self.proc is not None and self.proc.poll() is not None

    def stop(self) -> None:
        if self.proc is not None:
            terminate(self.proc.pid)
            self.proc.wait()
            self.pid_file.unlink(missing_ok=True)


@dataclass
class _PodState:
    backoff: float = BACKOFF_START
    next_try: float = 0.0
    prepared: bool = False
    annotated: bool = False


@dataclass
class KubeletDaemon:
    api: client.ApiClient
    kubelets: dict[str, StandInKubelet]  # node -> its stand-in
    stop: threading.Event = field(default_factory=threading.Event)
    pods: dict[str, _PodState] = field(default_factory=dict)  # namespace/name -> state
    registered: set[str] = field(default_factory=set)
    starters: dict[str, _Starter | HostedStarter] = field(default_factory=dict)  # node -> its on-demand plugin
    sockets: dict[str, int] = field(default_factory=dict)  # node -> inode of the registration socket registered
    plugins_dir: Path | None = None  # <node>.json: the on-demand nodes, read every round
    driver: str = ""
    minor: str = "1.34"
    versions: dict[str, tuple] = field(default_factory=dict)  # node -> (inode, mtime) of the file its starter came from
    hosts: Hosts | None = None  # the plugin hosts of nodes whose OnDemand names one
    serves_health: bool | None = None  # the apiserver serves allocatedResourcesStatus (None: not asked yet)
    health_changed: set[str] = field(default_factory=set)  # nodes whose plugin's health stream changed a device's health
    _health_lock: threading.Lock = field(default_factory=threading.Lock)
    mps: MpsPods | None = None  # MPS control daemon pods of its nodes, run on the host (mps_pods.py)

    def __post_init__(self) -> None:
        if self.mps is None:
            self.mps = MpsPods(lambda node: node in self.kubelets)

    def _discover(self) -> None:
        """Follow the plugins directory: nodes joined, left or changed since the last round."""
        if self.plugins_dir is None:
            return
        present = {}
        for path in self.plugins_dir.glob("*.json"):
            try:
                st = path.stat()
                present[path.stem] = (path, (st.st_ino, st.st_mtime_ns))
            except OSError:
                continue  # removed meanwhile
        for node in [n for n in self.versions if n not in present]:
            self._forget(node)
        for node, (path, version) in present.items():
            if self.versions.get(node) == version:
                continue
            try:
                how = OnDemand.read(path)
            except (OSError, ValueError, KeyError):
                continue  # replaced meanwhile: read next round
            old = self.starters.get(node)
            running = old is not None and old.running()
            if old is not None:  # rewritten (a driver update, a mode switch): the new plugin replaces the old
                old.stop()
                self.registered.discard(node)
                self.kubelets[node].close()
            if node not in self.kubelets or str(self.kubelets[node].registry_dir) != how.registry:
                self.kubelets[node] = StandInKubelet(node, self.driver, Path(how.registry), self.minor)
            # the node's kubelet keeps what it prepared: the new plugin is asked to unprepare it
            self.starters[node] = self._starter(node, how, path, version)
            self.versions[node] = version
            if running:  # as a DaemonSet's new pod replaces the old one at once
                self.starters[node].starting()

    def _starter(self, node: str, how: OnDemand, path: Path, version: tuple) -> _Starter | HostedStarter:
        """A process of the node's own, or its place in a plugin host (testbed.kubelet.plugin_host)."""
        if not how.host:
            return _Starter(how, path.with_suffix(".pid"))
        if self.hosts is None:
            self.hosts = Hosts(path.parent)
        return HostedStarter(node, how, self.hosts, f"{version[0]}:{version[1]}", START_GRACE)

    def _forget(self, node: str) -> None:
        """`node` left: stop its on-demand plugin and drop the node."""
        starter = self.starters.pop(node, None)
        if starter is not None:
            starter.stop()
        kubelet = self.kubelets.pop(node, None)
        if kubelet is not None:
            kubelet.close()
        self.registered.discard(node)
        self.sockets.pop(node, None)
        self.versions.pop(node, None)

    def _register(self) -> None:
        for node, starter in self.starters.items():
            if starter.exited():
                # its on-demand plugin exited (killed): this process is its supervisor, so start it again now
                self.registered.discard(node)
                self.kubelets[node].close()
                starter.starting()
        for node, kubelet in self.kubelets.items():
            socket = kubelet.registry_dir / f"{kubelet.driver}-reg.sock"
            current = _inode(socket)
            if node in self.registered and current != self.sockets.get(node):
                # its plugin stopped, or a new one made its socket anew (a restart): register again, as the
                # kubelet's plugin watcher does on the socket's creation
                self.registered.discard(node)
                kubelet.close()
            if node in self.registered or current is None:
                continue
            try:
                kubelet.register()
                self.registered.add(node)
                self.sockets[node] = current
                # resource health (testbed.kubelet.health) where the API serves it; not from a plugin host, whose
                # nodes share a few gRPC workers that one endless stream per node would take
                if self._serves_health() and not isinstance(self.starters.get(node), HostedStarter):
                    kubelet.follow_health(lambda n=node: self._health_changed(n))
            except Exception:  # noqa: BLE001 - the plugin is still starting; try again next round
                kubelet.close()

    def _event(self, pod, message: str) -> None:
        now = datetime.datetime.now(datetime.timezone.utc)
        body = {"metadata": {"generateName": f"{pod.metadata.name}."},
                "involvedObject": {"kind": "Pod", "namespace": pod.metadata.namespace, "name": pod.metadata.name,
                                   "uid": pod.metadata.uid, "apiVersion": "v1"},
                "reason": FAILED_REASON, "message": message, "type": "Warning",
                "source": {"component": "kubelet", "host": pod.spec.node_name},
                "firstTimestamp": now.isoformat(), "lastTimestamp": now.isoformat(), "count": 1}
        try:
            client.CoreV1Api(self.api).create_namespaced_event(pod.metadata.namespace, body)
        except ApiException:
            pass  # an event is best effort, as in the kubelet

    def handle(self, pod) -> None:
        """One pod as seen now: prepare, retry, or unprepare."""
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        node = pod.spec.node_name
        kubelet = self.kubelets.get(node or "")
        if self.mps is not None:
            self.mps.handle(pod)
        if kubelet is None or not holds_claims(pod):
            return
        finished = pod.metadata.deletion_timestamp is not None or (pod.status and pod.status.phase in ("Succeeded", "Failed"))
        state = self.pods.setdefault(key, _PodState())
        if finished:
            self.gone(key)
            return
        if state.prepared and not state.annotated:
            self._annotate(pod, state)
        if state.prepared:
            self._write_health(pod, kubelet)
        if state.prepared or time.monotonic() < state.next_try:
            return
        try:
            if node not in self.registered and node in self.starters and self.starters[node].starting():
                state.next_try = time.monotonic() + 0.2  # its plugin is starting: no event yet
                return
            if node not in self.registered:  # the kubelet's words when the plugin has not registered
                raise PrepareError(f"failed to prepare dynamic resources: DRA driver {kubelet.driver} is not registered")
            kubelet.prepare_pod(self.api, pod)
        except (PrepareError, Exception) as exc:  # noqa: BLE001 - any failure is the pod's event and a retry
            if not (kubelet.registry_dir / f"{kubelet.driver}-reg.sock").exists():
                self.registered.discard(node)  # the plugin went away: register it again when it is back
                kubelet.close()
            self._event(pod, str(exc))
            state.next_try = time.monotonic() + state.backoff
            state.backoff = min(state.backoff * 2, BACKOFF_MAX)
            return
        state.prepared = True
        self._annotate(pod, state)

    def _serves_health(self) -> bool:
        """Whether the cluster's minor serves allocatedResourcesStatus, asked of the apiserver once (the stand-in
        is started without --k8s; its minor picks only the plugin API's stubs)."""
        if self.serves_health is None:
            try:
                self.serves_health = writes_health(server_minor(client.VersionApi(self.api).get_code()))
            except Exception:  # noqa: BLE001 - the apiserver restarts: ask again at the next registration
                return False
        return self.serves_health

    def _health_changed(self, node: str) -> None:
        with self._health_lock:
            self.health_changed.add(node)

    def _write_health(self, pod, kubelet: StandInKubelet) -> None:
        """Write the pod's allocatedResourcesStatus as the kubelet would now (nothing when it is so already)."""
        if kubelet.health is None or pod.status is None or not pod.status.container_statuses:
            return  # KWOK has not written the containers' statuses yet: the event that does brings the pod back
        body = self.api.sanitize_for_serialization(pod)
        namespace = pod.metadata.namespace
        statuses = container_statuses(body, lambda claim: kubelet.devices_of(namespace, claim), kubelet.driver, kubelet.health.health)
        if not differs(body["status"]["containerStatuses"], statuses):
            return
        try:  # the whole list (the API replaces it whole); at the version read, not over a newer status
            client.CoreV1Api(self.api).patch_namespaced_pod_status(pod.metadata.name, namespace, {
                "metadata": {"resourceVersion": pod.metadata.resource_version}, "status": {"containerStatuses": statuses}})
        except Exception:  # noqa: BLE001 - a conflict or a restarting apiserver: the node's pods are looked at next round
            self._health_changed(pod.spec.node_name)

    def _write_changed_health(self) -> None:
        """Rewrite the health of the prepared pods of every node whose health stream changed."""
        with self._health_lock:
            nodes, self.health_changed = self.health_changed, set()
        for node in nodes:
            kubelet = self.kubelets.get(node)
            if kubelet is None:
                continue
            try:
                pods = client.CoreV1Api(self.api).list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            except Exception:  # noqa: BLE001 - the apiserver restarts: next round
                self._health_changed(node)
                continue
            for pod in pods:
                state = self.pods.get(f"{pod.metadata.namespace}/{pod.metadata.name}")
                if state is not None and state.prepared:
                    self._write_health(pod, kubelet)

    def _annotate(self, pod, state: _PodState) -> None:
        try:
            client.CoreV1Api(self.api).patch_namespaced_pod(pod.metadata.name, pod.metadata.namespace,
                                                           {"metadata": {"annotations": {PREPARED_ANNOTATION: "true"}}})
            state.annotated = True
        except Exception:  # noqa: BLE001 - the apiserver restarts: annotated on the pod's next event or list
            pass

    def gone(self, key: str) -> None:
        """The pod was deleted or finished: release its claims, unprepare those no other pod uses; also those
        whose prepare failed, as the kubelet does (it holds the pod's reference from before the call)."""
        if self.mps is not None:
            self.mps.gone(key)
        if self.pods.pop(key, None) is None:
            return
        for kubelet in self.kubelets.values():
            kubelet.release(key)
        self.unprepare_unused()

    def unprepare_unused(self) -> None:
        """Unprepare every claim no pod uses any more; one that fails (plugin down) is retried next round."""
        for node, kubelet in self.kubelets.items():
            if node not in self.registered or not kubelet.unused():
                continue
            try:
                kubelet.unprepare_unused()
            except Exception:  # noqa: BLE001 - retried by the next round, as the kubelet's reconciler does
                pass

    def run(self) -> None:
        try:
            self._run()
        finally:
            if self.mps is not None:
                self.mps.stop_all()
            if self.hosts is not None:  # first: a host stops all its nodes at once, a node's stop waits for its host
                self.hosts.stop_all()
            for starter in self.starters.values():
                starter.stop()

    def _run(self) -> None:
        core = client.CoreV1Api(self.api)
        while not self.stop.is_set():
            self._discover()
            self._register()
            self.unprepare_unused()
            self._write_changed_health()
            try:
                listing = core.list_pod_for_all_namespaces()
            except Exception:  # noqa: BLE001 - the apiserver restarts: keep the node's state, list again
                time.sleep(0.5)
                continue
            seen = set()
            for pod in listing.items:
                seen.add(f"{pod.metadata.namespace}/{pod.metadata.name}")
                self.handle(pod)
            for key in [k for k in self.pods if k not in seen]:
                self.gone(key)
            for key in [k for k in (self.mps.running if self.mps else {}) if k not in seen]:
                self.gone(key)
            w = watch.Watch()
            try:  # a short watch, then a relist: retries and registrations are due at least that often
                for event in w.stream(core.list_pod_for_all_namespaces, resource_version=listing.metadata.resource_version,
                                      timeout_seconds=1):
                    pod = event["object"]
                    key = f"{pod.metadata.namespace}/{pod.metadata.name}"
                    if event["type"] == "DELETED":
                        self.gone(key)
                    else:
                        self.handle(pod)
                    if self.stop.is_set():
                        break
            except Exception:  # noqa: BLE001 - an expired or cut watch (apiserver restart): list again
                time.sleep(0.5)
            finally:
                w.stop()


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def daemon_for(api: client.ApiClient, nodes: dict[str, Path], driver: str, minor: str = "1.34",
               plugins_dir: Path | None = None) -> KubeletDaemon:
    """A daemon for `nodes` (node name -> its plugin registry directory, the plugin running already) and the
    on-demand plugins described in `plugins_dir` (each <node>.json an OnDemand, its pid file beside it)."""
    return KubeletDaemon(api, {n: StandInKubelet(n, driver, d, minor) for n, d in nodes.items()},
                         plugins_dir=plugins_dir, driver=driver, minor=minor)
