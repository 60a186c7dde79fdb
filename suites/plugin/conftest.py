"""Fixtures for the kubelet-plugin suite: a KWOK API server for the claims, the plugin as a real process,
and a client acting as the kubelet over the plugin's unix sockets.

Claims are created in the API server with `status.allocation` written through the status
subresource, naming the devices a scheduler would have picked, so each test decides exactly which
device (e.g. which MIG placement) the plugin must prepare.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pytest
from kubernetes import client

from fake_gpus.driver.faults import fault_env
from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId, KubeletClient
from fake_gpus.driver.kubeletplugin.protos import load
from fake_gpus.machine.provision import provision
from fake_gpus.node import NodeHardware
from fake_gpus.nvml.build import ensure_library
from testbed.clusters.layout import from_flags

REPO = Path(__file__).resolve().parents[2]
NODE = "plg-node-0"
DRIVER = current_identity().driver
START_TIMEOUT = 120.0


@dataclass
class ApiServer:
    api: client.ApiClient
    kubeconfig: Path
    namespace: str


@pytest.fixture(scope="session")
def apiserver(bed) -> Iterator[ApiServer]:
    """A KWOK cluster (real apiserver) holding the claims; deleted at the end of the session unless --keep-cluster."""
    layout = from_flags([f"{NODE}=h100-80gb:1:whole"])
    # seen on a loaded machine: the KWOK node never turns Ready although the apiserver is up; one more try
    with bed(layout, label="plg", backend="kwok", attempts=2) as testbed:
        namespace = "plugin-tests"
        if not testbed.core.list_namespace(field_selector=f"metadata.name={namespace}").items:  # a reused cluster has it
            testbed.core.create_namespace(body={"metadata": {"name": namespace}})
        yield ApiServer(testbed.api, testbed.kubeconfig, namespace)


@pytest.fixture
def make_claim(apiserver: ApiServer) -> Callable[..., ClaimId]:
    """make_claim(["gpu-0-mig-1g10gb-19-3"], pool=NODE, admin=False) -> a claim allocated exactly these devices
    (with adminAccess when `admin`)."""

    def make(devices: Sequence[str], pool: str = NODE, driver: str = DRIVER, allocate: bool = True, admin: bool = False) -> ClaimId:
        resource = client.ResourceV1Api(apiserver.api)
        name = f"claim-{uuid.uuid4().hex[:8]}"
        if admin:  # what the API asks of admin access
            client.CoreV1Api(apiserver.api).patch_namespace(apiserver.namespace, {"metadata": {"labels": {"resource.kubernetes.io/admin-access": "true"}}})
        body = {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": name},
                "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": f"gpu.{DRIVER.split('.', 1)[1]}",
                                                                               "allocationMode": "ExactCount", "count": max(1, len(devices)),
                                                                               **({"adminAccess": True} if admin else {})}}]}}}
        created = resource.create_namespaced_resource_claim(apiserver.namespace, body)
        if allocate:
            results = [{"request": "gpu", "driver": driver, "pool": pool, "device": d, **({"adminAccess": True} if admin else {})}
                       for d in devices]
            selector = {"nodeSelectorTerms": [{"matchFields": [{"key": "metadata.name", "operator": "In", "values": [NODE]}]}]}
            resource.patch_namespaced_resource_claim_status(
                name, apiserver.namespace, {"status": {"allocation": {"devices": {"results": results}, "nodeSelector": selector}}})
        return ClaimId(apiserver.namespace, created.metadata.uid, name)

    return make


@pytest.fixture(scope="session")
def nvml_lib_dir() -> Path:
    return ensure_library()


@pytest.fixture(scope="session")
def protos():
    return load()


@pytest.fixture
def node_dir() -> Iterator[Path]:
    """A short-pathed scratch directory (unix socket paths are limited to 107 bytes)."""
    d = Path(tempfile.mkdtemp(prefix="plg-", dir="/tmp"))
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def state_dir(node_dir: Path) -> Path:
    """A node with two H100s, MIG off."""
    d = node_dir / "nvml"
    provision(d, NodeHardware("h100-80gb", 2))
    return d


@dataclass
class PluginProcess:
    """The plugin running as `python -m fake_gpus.driver.kubeletplugin`, restartable."""

    args: list[str]
    env: dict[str, str]
    root: Path
    proc: subprocess.Popen | None = None
    lines: list[str] = field(default_factory=list)

    @property
    def plugin_dir(self) -> Path:
        return self.root / "plugins" / DRIVER

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / "dra.sock"

    @property
    def registration_socket(self) -> Path:
        return self.root / "plugins_registry" / f"{DRIVER}-reg.sock"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "cdi"

    @property
    def checkpoint(self) -> dict:
        return json.loads((self.plugin_dir / "checkpoint.json").read_text())

    def start(self) -> None:
        """Start and wait for the plugin's `serving` line (it logs it once both sockets listen)."""
        self.lines = []
        serving = threading.Event()
        self.proc = subprocess.Popen(self.args, env=self.env, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)

        def drain(stream) -> None:
            for line in stream:
                self.lines.append(line)
                if "kubelet-plugin: serving" in line:
                    serving.set()
            serving.set()  # exited: wake the waiter, which then reports the exit

        threading.Thread(target=drain, args=(self.proc.stderr,), daemon=True).start()
        serving.wait(START_TIMEOUT)
        if self.proc.poll() is not None or not any("kubelet-plugin: serving" in l for l in self.lines):
            raise AssertionError("plugin did not start:\n" + "".join(self.lines[-40:]))

    def kill9(self) -> None:
        assert self.proc is not None
        self.proc.kill()
        self.proc.wait(timeout=30)

    def terminate(self) -> int:
        """SIGTERM and wait; returns the exit code."""
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=90)  # generous: a loaded machine is slow, and a kill would hide the exit code
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def client(self) -> KubeletClient:
        return KubeletClient(self.registration_socket, self.dra_socket)


@pytest.fixture
def start_plugin(apiserver: ApiServer, nvml_lib_dir: Path, node_dir: Path, protos) -> Iterator[Callable[..., PluginProcess]]:
    """start_plugin(state_dir, faults=(), mig="dynamic", env={}, args=()) -> a running plugin; stopped at teardown."""
    started: list[PluginProcess] = []

    def start(state_dir: Path, faults: Sequence[str] = (), mig: str = "dynamic", env: dict[str, str] | None = None,
              args: Sequence[str] = ()) -> PluginProcess:
        extra = env or {}
        root = node_dir / f"kubelet{len(started)}"
        env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "FAKE_NVML_STATE_DIR", "DRA_TESTBED_FAULTS")}
        env["PYTHONPATH"] = f"{REPO}:{env.get('PYTHONPATH', '')}".rstrip(":")
        env.update(fault_env(faults))
        env.update(extra)
        command = [sys.executable, "-m", "fake_gpus.driver.kubeletplugin", "--node-name", NODE, "--state-dir", str(state_dir),
                "--nvml-lib-dir", str(nvml_lib_dir), "--plugin-dir", str(root / "plugins" / DRIVER),
                "--registry-dir", str(root / "plugins_registry"), "--cdi-dir", str(root / "cdi"),
                "--kubeconfig", str(apiserver.kubeconfig), "--mig", mig, "--health-interval", "0.2", *args]
        plugin = PluginProcess(command, env, root)
        started.append(plugin)
        plugin.start()
        return plugin

    yield start
    for plugin in started:
        if plugin.proc is not None:
            plugin.terminate()


@pytest.fixture
def kubelet() -> Callable[[PluginProcess], KubeletClient]:
    """kubelet(plugin) -> a client that registered the plugin like the kubelet does (GetInfo, then connect)."""
    clients: list[KubeletClient] = []

    def connect(plugin: PluginProcess) -> KubeletClient:
        c = plugin.client()
        clients.append(c)
        return c

    yield connect
    for c in clients:
        c.close()


VIEW = """
import json, pynvml
pynvml.nvmlInit()
rows = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    migs = []
    try:
        n = pynvml.nvmlDeviceGetMaxMigDeviceCount(h)
    except pynvml.NVMLError:
        n = 0
    for j in range(n):
        try:
            migs.append(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, j)))
        except pynvml.NVMLError_NotFound:
            pass  # empty slot
        except pynvml.NVMLError_NotSupported:
            break  # MIG off
    rows.append({"uuid": pynvml.nvmlDeviceGetUUID(h), "minor": pynvml.nvmlDeviceGetMinorNumber(h), "migs": migs})
print(json.dumps(rows))
"""

INSTANCES = """
import ctypes, json, pynvml
pynvml.nvmlInit()
out = []
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    if pynvml.nvmlDeviceGetMigMode(h)[0] != 1:
        continue
    for p in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(h, p)
        except pynvml.NVMLError:
            continue
        buf = (pynvml.c_nvmlGpuInstance_t * 8)()
        count = ctypes.c_uint(0)
        pynvml.nvmlDeviceGetGpuInstances(h, info.id, buf, ctypes.byref(count))
        for k in range(count.value):
            gi = pynvml.nvmlGpuInstanceGetInfo(buf[k])
            cis = (pynvml.c_nvmlComputeInstance_t * 8)()
            n = ctypes.c_uint(0)
            try:
                pynvml.nvmlGpuInstanceGetComputeInstances(buf[k], 0, cis, ctypes.byref(n))
            except pynvml.NVMLError:
                pass
            name = info.name.decode() if isinstance(info.name, bytes) else info.name
            out.append({"minor": pynvml.nvmlDeviceGetMinorNumber(h), "profile": name.removeprefix("MIG "),
                        "start": gi.placement.start, "size": gi.placement.size, "compute_instances": n.value})
print(json.dumps(sorted(out, key=lambda r: (r["minor"], r["start"]))))
"""


def run_nvml(code: str, env: dict[str, str]) -> list:
    """Run a pynvml snippet in a fresh process with exactly `env` (plus PATH/PYTHONPATH); its JSON output."""
    full = {"PATH": os.environ.get("PATH", ""), "PYTHONPATH": str(REPO), "HOME": os.environ.get("HOME", "/")}
    full.update(env)
    proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        raise AssertionError(f"pynvml client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
    return json.loads(proc.stdout)


@pytest.fixture
def mig_instances(nvml_lib_dir: Path) -> Callable[[Path], list[dict]]:
    """mig_instances(state_dir) -> the GPU instances NVML reports on the node (profile, placement, CIs)."""

    def read(state_dir: Path) -> list[dict]:
        return run_nvml(INSTANCES, {"LD_LIBRARY_PATH": str(nvml_lib_dir), "FAKE_NVML_STATE_DIR": str(state_dir)})

    return read


def cdi_env(spec: dict, device_id: str) -> dict[str, str]:
    """The environment the CDI device `vendor/class=name` gives a container."""
    kind, name = device_id.split("=", 1)
    assert spec["kind"] == kind, (spec["kind"], device_id)
    (device,) = [d for d in spec["devices"] if d["name"] == name]
    return dict(e.split("=", 1) for e in device["containerEdits"]["env"])


def device_nodes(spec: dict, device_id: str) -> set[str]:
    """Paths of the device nodes the CDI device `vendor/class=name` gives a container."""
    (device,) = [d for d in spec["devices"] if f"{spec['kind']}={d['name']}" == device_id]
    return {n["path"] for n in device["containerEdits"].get("deviceNodes", [])}


def mig_instances_raw(state_dir) -> list[tuple[int, int]]:
    """(GPU instance id, compute instance id) of every compute instance in the node's NVML state."""
    from fake_gpus.nvml.state import validate_state_dir

    return [(ci.gi, ci.id) for ci in validate_state_dir(state_dir)[1].compute_instances]


def container_view(spec: dict, device_id: str) -> list:
    """What nvidia-ml-py shows inside a container given this CDI device: GPUs with their MIG devices."""
    return run_nvml(VIEW, cdi_env(spec, device_id))


def container_env(specs: Sequence[dict], device_ids: Sequence[str]) -> dict[str, str]:
    """The environment of a container given several CDI devices (from several claims' specs): the
    runtime applies each device's edits in turn, so a name set by two devices keeps the last value."""
    env: dict[str, str] = {}
    for device_id in device_ids:
        (spec,) = [s for s in specs if any(device_id == f"{s['kind']}={d['name']}" for d in s["devices"])]
        env.update(cdi_env(spec, device_id))
    return env
