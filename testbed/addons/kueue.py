"""Kueue (sigs.k8s.io/kueue) on a KWOK bed: its manager as a host process with a kubeconfig, its CRDs from
the Go module the manager was built from, DRA quota by DeviceClass.

No container registry is reachable, so Kueue's own deployment (an image behind a Service) cannot run. The
manager runs here as a host process, like the bed's control plane. What that changes, and why:

- Webhooks: no MutatingWebhookConfiguration or ValidatingWebhookConfiguration is registered. Kueue's job
  webhook does one thing a test needs, suspending a Job that names a LocalQueue; the tests create their Jobs
  suspended with the queue-name label, which is what that webhook would have written. Kueue's job controller
  (not a webhook) then makes the Workload, admits it and unsuspends the Job. Registering the webhooks by URL
  would fail TLS: Kueue's internal certificates name only `kueue-webhook-service.kueue-system.svc`.
- Certificates: Kueue's internal certificate management stays on (the default). Turned off, the manager reads
  metrics certificates from the fixed path /etc/kueue/metrics/certs, outside any bed. On, it blocks at start
  until it has injected its CA into the CRDs' conversion webhooks, so the CRDs carry the conversion stanza of
  Kueue's own kustomize patches (config/components/crd/patches). The KWOK apiserver cannot reach that
  Service (no kube-proxy): only reads of an older API version (v1beta1) would need it; everything here uses
  the storage version, v1beta2.
- DRA: Kueue's feature gate `DynamicResourceAllocation` (alpha, off by default in v0.17.0) and
  `resources.deviceClassMappings`, which count a claim's devices of a DeviceClass as a quota resource.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Iterator

import yaml

from fake_gpus.driver import rest
from hostenv.goenv import go_binary, go_env
from hostenv.processes import alive, terminate
from hostenv.versions import RENDERERS
from testbed.clusters.kwok.ports import kernel_ports
from testbed.errors import EnvironmentProblem
from testbed.toolchain.renderers import ensure_renderer

if TYPE_CHECKING:
    from kubernetes import client

MODULE = "sigs.k8s.io/kueue"
NAMESPACE = "kueue-system"  # Kueue's default; its certificate Secret lives here
WEBHOOK_SERVICE = "kueue-webhook-service"  # the name Kueue's certificates are issued for
WEBHOOK_SECRET = "kueue-webhook-server-cert"  # Kueue's default Secret for them
CRD_PATH = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"
API = "kueue.x-k8s.io/v1beta2"  # the CRDs' storage version
# the quota resource a ClusterQueue names for claims of the gpu.nvidia.com DeviceClass
GPU_RESOURCE = "dra-testbed.io/gpu"
GPU_DEVICE_CLASS = "gpu.nvidia.com"
START_TIMEOUT = 120.0
LOG = "kueue.log"  # the manager's output, in its home


class KueueError(EnvironmentProblem):
    """Kueue could not be set up or did not start; the message names its log."""


def module_dir(version: str | None = None) -> Path:
    """The source of Kueue's Go module `version` (default: the pinned one) in the module cache, downloaded
    through the module proxy when missing (the build of the manager downloads it too)."""
    version = version or RENDERERS["kueue"]
    out = subprocess.run([go_binary(), "mod", "download", "-json", f"{MODULE}@{version}"],
                         env=go_env(), capture_output=True, text=True, cwd="/")
    if out.returncode != 0:
        raise KueueError(f"cannot download Go module {MODULE}@{version}: {(out.stderr or out.stdout).strip()}")
    return Path(json.loads(out.stdout)["Dir"])


def crd_documents(source: Path) -> list[dict]:
    """Kueue's CRDs (config/components/crd/bases), each with the conversion webhook of Kueue's own patch for it,
    pointed at the Service in NAMESPACE the internal certificates are issued for."""
    crd_dir = source / "config" / "components" / "crd"
    # the patches its kustomization applies: the folder holds one more (resourceflavors) that it leaves out
    applied = [entry["path"] for entry in yaml.safe_load((crd_dir / "kustomization.yaml").read_text()).get("patches", [])]
    conversions = {}
    for patch in applied:
        body = yaml.safe_load((crd_dir / patch).read_text())
        conversion = body["spec"]["conversion"]
        conversion["webhook"]["clientConfig"]["service"].update(namespace=NAMESPACE, name=WEBHOOK_SERVICE)
        conversions[body["metadata"]["name"]] = conversion
    crds = []
    for path in sorted((crd_dir / "bases").glob("*.yaml")):
        crd = yaml.safe_load(path.read_text())
        if crd["metadata"]["name"] in conversions:
            crd["spec"]["conversion"] = conversions[crd["metadata"]["name"]]
        crds.append(crd)
    return crds


def apply_crds(api: client.ApiClient, crds: list[dict], timeout: float = 60.0) -> None:
    """Create the CRDs (those already there are left as they are) and wait until the apiserver serves each."""
    for crd in crds:
        rest.create(api, CRD_PATH, crd, exist_ok=True)
    deadline = time.monotonic() + timeout
    for crd in crds:
        name = crd["metadata"]["name"]
        while not _established(rest.request(api, "GET", f"{CRD_PATH}/{name}")):
            if time.monotonic() > deadline:
                raise KueueError(f"CRD {name} not established within {timeout:.0f}s")
            time.sleep(0.2)


def _established(crd: dict) -> bool:
    return any(c["type"] == "Established" and c["status"] == "True" for c in (crd.get("status") or {}).get("conditions") or [])


def configuration(home: Path, webhook_port: int, health_port: int) -> dict:
    """Kueue's Configuration (config.kueue.x-k8s.io/v1beta2) for a manager on this machine: loopback ports the
    kernel chose (several beds run at once), no leader election (one manager), Jobs only, DRA quota by class."""
    return {
        "apiVersion": "config.kueue.x-k8s.io/v1beta2",
        "kind": "Configuration",
        "namespace": NAMESPACE,
        "leaderElection": {"leaderElect": False},
        "health": {"healthProbeBindAddress": f"127.0.0.1:{health_port}"},
        "metrics": {"bindAddress": "0"},  # "0": no metrics server
        "webhook": {"host": "127.0.0.1", "port": webhook_port, "certDir": str(home / "certs")},
        "internalCertManagement": {"enable": True, "webhookServiceName": WEBHOOK_SERVICE, "webhookSecretName": WEBHOOK_SECRET},
        "manageJobsWithoutQueueName": False,
        "integrations": {"frameworks": ["batch/job"]},
        # VisibilityOnDemand's server binds a fixed port (8082) that a second bed's manager would collide on
        "featureGates": {"DynamicResourceAllocation": True, "VisibilityOnDemand": False},
        "resources": {"deviceClassMappings": [{"name": GPU_RESOURCE, "deviceClassNames": [GPU_DEVICE_CLASS]}]},
    }


@dataclass(frozen=True)
class KueueManager:
    """A running Kueue manager: its pid, its home (config, certificates, log) and health port."""

    pid: int
    home: Path  # config.yaml, certs/, the log
    health_port: int  # on 127.0.0.1: /readyz

    @property
    def readyz(self) -> str:
        return f"http://127.0.0.1:{self.health_port}/readyz"

    def ready(self) -> bool:
        """Kueue's readiness probe answers: its certificates are in place and its webhook server serves."""
        import urllib.request

        try:
            with urllib.request.urlopen(self.readyz, timeout=2) as answer:
                return answer.status == 200
        except OSError:
            return False

    def errors(self, count: int = 3) -> str:
        """The log's last `count` error lines (the lines of its own shutdown say nothing of why), cut short."""
        try:
            lines = (self.home / LOG).read_text(errors="replace").splitlines()
        except OSError:
            return "no log"
        failed = [line[:600] for line in lines if '"level":"error"' in line][-count:]
        return "\n".join(failed) or "no error logged; last line: " + (lines[-1][:600] if lines else "none")


def start(api: client.ApiClient, kubeconfig: Path, home: Path, binary: Path | None = None) -> KueueManager:
    """Install Kueue's CRDs and namespace in the bed behind `api` and start its manager as a host process
    with `kubeconfig`; returns once it is ready. Its files go under `home` (wiped first)."""
    binary = binary or ensure_renderer("kueue")
    apply_crds(api, crd_documents(module_dir()))
    rest.create(api, "/api/v1/namespaces", {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NAMESPACE}},
                exist_ok=True)
    # the certificate rotator fills this Secret but does not create it: Kueue's release manifests ship it empty
    rest.create(api, f"/api/v1/namespaces/{NAMESPACE}/secrets", {
        "apiVersion": "v1", "kind": "Secret", "metadata": {"name": WEBHOOK_SECRET}, "type": "Opaque"}, exist_ok=True)
    shutil.rmtree(home, ignore_errors=True)
    home.mkdir(parents=True)
    webhook_port, health_port = kernel_ports(2)
    config = home / "config.yaml"
    config.write_text(yaml.safe_dump(configuration(home, webhook_port, health_port)))
    with (home / LOG).open("ab") as log:
        proc = subprocess.Popen([str(binary), f"--config={config}", f"--kubeconfig={kubeconfig}"], stdout=log,
                                stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
    (home / "kueue.pid").write_text(f"{proc.pid}\n")
    manager = KueueManager(proc.pid, home, health_port)
    deadline = time.monotonic() + START_TIMEOUT
    certs = home / "certs"
    while not manager.ready():
        if not (certs / "tls.crt").exists():
            mount_certificates(api, certs)
        if proc.poll() is not None or time.monotonic() > deadline:
            stop(manager)
            why = f"exited with {proc.returncode}" if proc.returncode is not None else f"not ready in {START_TIMEOUT:.0f}s"
            raise KueueError(f"Kueue's manager {why} (log: {home / LOG}):\n{manager.errors()}")
        time.sleep(0.5)
    return manager


def mount_certificates(api: client.ApiClient, certs: Path) -> bool:
    """Write the certificates Kueue put into its Secret into `certs`, as the kubelet's Secret volume does for
    its Pod: the manager waits for the files (cert-controller's `ensureCertsMounted`) before it is ready.
    False while the Secret holds none yet."""
    import base64

    data = rest.request(api, "GET", f"/api/v1/namespaces/{NAMESPACE}/secrets/{WEBHOOK_SECRET}").get("data") or {}
    if "tls.crt" not in data or "tls.key" not in data:
        return False
    certs.mkdir(parents=True, exist_ok=True)
    for key in ("tls.key", "ca.crt", "tls.crt"):  # tls.crt last: the manager reads the pair once it sees it
        if key in data:
            (certs / key).write_bytes(base64.b64decode(data[key]))
    return True


def stop(manager: KueueManager, grace: float = 10.0) -> None:
    """SIGTERM the manager, SIGKILL after `grace` s."""
    if alive(manager.pid):
        terminate(manager.pid, grace)
    (manager.home / "kueue.pid").unlink(missing_ok=True)


@contextmanager
def running(api: client.ApiClient, kubeconfig: Path, home: Path) -> Iterator[KueueManager]:
    """Kueue's manager running against the bed for the duration of the block, stopped afterwards."""
    manager = start(api, kubeconfig, home)
    try:
        yield manager
    finally:
        stop(manager)
