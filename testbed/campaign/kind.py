"""The campaign's kind target: real kubelets restart what is killed.

Units are containers: the control plane's static pods (etcd, kube-apiserver, kube-scheduler) and, on
every GPU worker, the driver DaemonSet pod's `kubelet-plugin` and `slice-publisher`. A kill SIGKILLs
the container's process (its pid from crictl, by id); the node's kubelet starts a new container, with
its usual crash-loop back-off. A unit runs again once crictl shows a running container other than the
one killed (for the apiserver and etcd: and the apiserver's /readyz answers); the time from the kill to
then is the kill's outage, excused from the campaign's bounds. Node state is read from the host (the fake NVML state directory is a bind mount) and from
the worker's plugin directory and /var/run/cdi.
"""

from __future__ import annotations

import subprocess
import tempfile
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import yaml
from kubernetes import client

from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.kubeletplugin.checkpoint import PREPARED
from fake_gpus.driver.kubeletplugin.server import CHECKPOINT
from testbed.campaign.audit import NodeState, cdi_uids, read_checkpoint, read_instances
from testbed.campaign.outages import Outages
from testbed.host.health import http_ok
from testbed.campaign.session import Session, session_on
from testbed.clusters.layout import Layout

STATIC = {"etcd": "etcd", "apiserver": "kube-apiserver", "scheduler": "kube-scheduler"}
DRIVER_CONTAINERS = {"plugin": "kubelet-plugin", "publisher": "slice-publisher"}
SUPER_ADMIN = "/etc/kubernetes/super-admin.conf"  # kubeadm's (1.29+) credential in system:masters
BACK_ON_TIMEOUT = 400.0  # the kubelet's crash-loop back-off grows to 5 min


class ExecError(RuntimeError):
    """A `docker exec` on a node failed: what it would have read is unknown, not empty."""


def _exec(node: str, *args: str, timeout: float = 60) -> str:
    out = subprocess.run(["docker", "exec", node, *args], capture_output=True, text=True, timeout=timeout)
    if out.returncode != 0:
        raise ExecError(f"docker exec {node} {' '.join(args)}: exit {out.returncode}: {out.stderr.strip()[:200]}")
    return out.stdout


def read_if_present(node: str, path: str) -> str:
    """The file's text, "" only when it does not exist (a failed read raises ExecError)."""
    return _exec(node, "sh", "-c", 'test ! -e "$1" || cat "$1"', "sh", path)


def operator_kubeconfig(cluster) -> Path:
    """kubeadm's super-admin credential (group system:masters) on the host's address of the apiserver.

    kind's own kubeconfig is kubeadm's admin.conf, whose group kubeadm:cluster-admins is authorized by an RBAC
    binding: an apiserver the campaign has just restarted answers it 403 until its RBAC caches are synced
    (seen as harness:ForbiddenException in 4 of the first 6 seeds on kind). system:masters is authorized
    before RBAC is asked. The harness is the cluster's operator, not the subject: the driver's own
    credentials still go through RBAC."""
    text = read_if_present(f"{cluster.kind_name}-control-plane", SUPER_ADMIN)
    if not text:
        raise ExecError(f"{cluster.kind_name}-control-plane has no {SUPER_ADMIN}")
    conf = yaml.safe_load(text)
    server = yaml.safe_load(cluster.kubeconfig().read_text())["clusters"][0]["cluster"]["server"]
    for entry in conf["clusters"]:
        entry["cluster"]["server"] = server  # the node's file names the apiserver as seen inside kind's network
    path = cluster.home / "super-admin.kubeconfig"
    path.touch(mode=0o600)
    path.write_text(yaml.safe_dump(conf))
    return path


def _running_container(node: str, name: str) -> str | None:
    try:
        ids = _exec(node, "crictl", "ps", "--name", f"^{name}$", "--state", "running", "-q").split()
    except ExecError:
        return None  # not known to run: a kill finds nothing, a killed unit is not back yet (both safe)
    return ids[0] if ids else None


# A real kubelet tries a refused prepare again at its next pod sync: syncFrequency (1 min) jittered by up to
# half (Campaign.prepare_retry)
KUBELET_RETRY = 90.0


@dataclass
class KindUnit:
    name: str
    kind: str
    node: str  # the node container
    container: str  # the container's name in the pod
    killed: str | None = None  # id of the container killed last, until a new one runs
    killed_at: float | None = None
    crashes: int = 0  # not counted on kind (the kubelet restarts what exits): reported as 0
    exit_reasons: list[str] = field(default_factory=list)  # none either: kept for the Supervision protocol
    downtimes: list[float] = field(default_factory=list)
    outages: Outages | None = None  # the supervision's, told when a killed unit runs again
    ready: Callable[[], bool] | None = None  # whether its new container serves (the apiserver's /readyz)

    def is_running(self) -> bool:
        current = _running_container(self.node, self.container)
        if current is None or current == self.killed:
            return False
        if self.killed_at is not None:
            if self.ready is not None and not self.ready():
                return False  # runs, does not serve yet: still down
            self.downtimes.append(time.monotonic() - self.killed_at)
            if self.outages is not None:
                self.outages.up(self.name)
            self.killed, self.killed_at = None, None
        return True


class KindSupervision:
    """The Supervision protocol over kubelets: kill by pid, and wait for the kubelet's restart. The chaos thread
    and the campaign's thread both ask whether units run, and asking closes a kill's outage: one at a time."""

    def __init__(self, units: list[KindUnit], period: float = 1.0, outages: Outages | None = None) -> None:
        self.units = {u.name: u for u in units}
        self.period = period
        self.lock = threading.Lock()
        self.outages = outages or Outages(cap=BACK_ON_TIMEOUT)
        for unit in units:
            unit.outages = self.outages

    def of_kind(self, kind: str) -> list[KindUnit]:
        return [u for u in self.units.values() if u.kind == kind]

    def kill(self, name: str) -> KindUnit:
        with self.lock:
            unit = self.units[name]
            container = _running_container(unit.node, unit.container)
            if container is None:
                return unit
            try:
                pid = _exec(unit.node, "crictl", "inspect", "--output", "go-template", "--template", "{{.info.pid}}", container).strip()
                if pid.isdigit():
                    _exec(unit.node, "kill", "-9", pid)
            except ExecError:
                return unit  # no kill happened: not counted (the chaos tries another time)
            if pid.isdigit():
                unit.killed, unit.killed_at = container, time.monotonic()
                self.outages.down(unit.name, unit.killed_at)
            return unit

    def all_running(self) -> bool:
        with self.lock:
            return all(u.is_running() for u in self.units.values())

    def wait_running(self, timeout: float = BACK_ON_TIMEOUT) -> bool:
        deadline = time.monotonic() + max(timeout, BACK_ON_TIMEOUT)
        while time.monotonic() < deadline:
            if self.all_running():
                return True
            time.sleep(self.period)
        return False


@dataclass
class KindTarget:
    cluster: object  # KindCluster
    layout: Layout
    driver: str
    workers: dict[str, str] = field(default_factory=dict)  # layout node -> node container

    def discover(self, api: client.ApiClient) -> list[KindUnit]:
        core = client.CoreV1Api(api)
        self.workers = {n.metadata.labels["dra-testbed.io/layout-node"]: n.metadata.name
                        for n in core.list_node(label_selector="dra-testbed.io/layout-node").items}
        control_plane = f"{self.cluster.kind_name}-control-plane"
        units = [KindUnit(name, kind, control_plane, name) for kind, name in STATIC.items()]
        readyz = api.configuration.host.rstrip("/") + "/readyz"  # kind maps the apiserver to a host port
        for unit in units:
            if unit.kind in ("apiserver", "etcd"):  # back once the apiserver serves from etcd again
                unit.ready = lambda: http_ok(readyz)
        for layout_node, worker in sorted(self.workers.items()):
            units += [KindUnit(f"{kind}/{layout_node}", kind, worker, container) for kind, container in DRIVER_CONTAINERS.items()]
        return units

    def node_states(self) -> list[NodeState]:
        states = []
        for node in self.layout.nodes:
            worker = self.workers[node.name]
            with tempfile.TemporaryDirectory() as tmp:
                path = Path(tmp) / CHECKPOINT
                text = read_if_present(worker, f"/var/lib/kubelet/plugins/{self.driver}/{CHECKPOINT}")
                path.write_text(text)
                checkpoint = read_checkpoint(path) if text else {}  # an empty file is corrupt: read_checkpoint raises
            cdi = _exec(worker, "sh", "-c", 'test ! -d /var/run/cdi || ls /var/run/cdi')
            states.append(NodeState(node.name, node.mode.kind == "dynamic-mig",
                                    read_instances(self.cluster.home / "nodes" / node.name / "nvml"), checkpoint,
                                    cdi_uids(cdi.split())))
        return states

    def prepared(self, pod) -> bool:
        """Every claim of the pod is prepared in its node's plugin checkpoint (the kubelet then pulls the image)."""
        generated = {s.resource_claim_name for s in (pod.status.resource_claim_statuses or []) if s.resource_claim_name}
        names = {r.resource_claim_name for r in pod.spec.resource_claims or [] if r.resource_claim_name} | generated
        layout_node = next((n for n, w in self.workers.items() if w == pod.spec.node_name), None)
        state = next((s for s in self.node_states() if s.node == layout_node), None)
        if state is None:
            return False
        prepared = {(r.namespace, r.name) for r in state.checkpoint.values() if r.state == PREPARED}
        return all((pod.metadata.namespace, n) in prepared for n in names)


@contextmanager
def kind_session(cluster, layout: Layout, faults: list[str], label: str = "kind", progress: Callable[[str], None] = print,
                 **campaign_args) -> Iterator[Session]:
    """A Session on a running kind `cluster` whose driver already runs with `faults`."""
    api = cluster.api_client()
    try:
        target = KindTarget(cluster, layout, current_identity().driver)
        supervision = KindSupervision(target.discover(api))
    finally:
        api.close()
    campaign_args.setdefault("quiet_timeout", 120.0)
    campaign_args.setdefault("prepare_retry", KUBELET_RETRY)
    with session_on("kind", operator_kubeconfig(cluster), layout, target, supervision, faults, label, progress, **campaign_args) as session:
        yield session
