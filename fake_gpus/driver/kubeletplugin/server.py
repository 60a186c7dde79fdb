"""The plugin's gRPC services on the kubelet's sockets: registration, DRA v1 + v1beta1, health v1alpha1."""

from __future__ import annotations

import sys
import threading
import time
from concurrent import futures
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import ContextManager, Mapping

import grpc

from fake_gpus.driver.kubeletplugin import MIG_DYNAMIC, cdi
from fake_gpus.driver.kubeletplugin.calllog import SELF_CHECK, CallLog
from fake_gpus.driver.kubeletplugin.checkpoint import Checkpoint
from fake_gpus.driver.kubeletplugin.claims import api_client, read_claim
from fake_gpus.driver.claim_status import api_apply
from fake_gpus.driver.kubeletplugin.device_status import DeviceStatusWriter
from fake_gpus.driver.kubeletplugin.driver import ClaimRef, Driver, DriverSettings
from fake_gpus.driver.kubeletplugin.health_stream import POLL_S, DeviceHealthSource, driver_inventory
from fake_gpus.driver.nvml_adapter import Nvml, library_dir, load_library
from fake_gpus.driver.kubeletplugin.protos import KubeletProtos, load
from fake_gpus.driver.kubeletplugin.strategies import MpsControl, NvidiaSmi
from fake_gpus.driver.readiness import ReadyServer
from fake_gpus.node import Mode, hardware_from_labels
from fake_gpus.node.driver_root import DRIVER_ROOT_DIR, SMI
from hostenv.versions import DEFAULT_MINOR

SUPPORTED_VERSIONS = ("v1.DRAPlugin", "v1beta1.DRAPlugin")
DRA_SOCKET = "dra.sock"
CHECKPOINT = "checkpoint.json"
READY_CALL_SECONDS = 2.0  # a readiness check's own calls to the plugin's sockets


def log(msg: str) -> None:
    print(f"kubelet-plugin: {msg}", file=sys.stderr, flush=True)


@dataclass(frozen=True)
class PluginConfig:
    """Everything the command line sets."""

    node_name: str
    driver: str
    plugin_dir: Path
    registry_dir: Path
    cdi_dir: Path
    kubeconfig: str
    state_dir: Path | None = None
    nvml_lib_dir: Path | None = None
    pool_name: str | None = None
    host_state_dir: Path | None = None  # the state dir as the node (container runtime) sees it
    host_lib_dir: Path | None = None
    mig_mode: str = MIG_DYNAMIC
    k8s: str = DEFAULT_MINOR
    faults: frozenset[str] = frozenset()
    health_interval: float = 10.0
    ready_port: int | None = None  # serve the readiness endpoint (readiness.py) on this port
    shares: str | None = None  # --consumable-shares; None: as the node's label says
    shares_set: bool = False  # --consumable-shares given (`disabled` overrides the label too)
    namespace: str = "default"  # where MPS control daemons' Deployments go

    @property
    def dra_socket(self) -> Path:
        return self.plugin_dir / DRA_SOCKET

    @property
    def registration_socket(self) -> Path:
        return self.registry_dir / f"{self.driver}-reg.sock"


class DraService:
    """NodePrepareResources / NodeUnprepareResources for one API version's message module."""

    def __init__(self, plugin: "KubeletPlugin", messages, version: str) -> None:
        self.plugin = plugin
        self.m = messages
        self.version = version

    def NodePrepareResources(self, request, context):
        if self.plugin.calls is not None:
            self.plugin.calls.record("NodePrepareResources", self.version, request.claims)
        if "prepare-hangs" in self.plugin.config.faults:
            self.plugin.hang(context)
            context.abort(grpc.StatusCode.UNAVAILABLE, "injected fault prepare-hangs: plugin stopping")
        results = self.plugin.driver.prepare([ClaimRef(c.namespace, c.uid, c.name) for c in request.claims])
        response = self.m.NodePrepareResourcesResponse()
        for uid, result in results.items():
            entry = response.claims[uid]
            entry.error = result.error
            for d in result.devices:
                entry.devices.append(self.m.Device(request_names=d.request_names, pool_name=d.pool_name,
                                                   device_name=d.device_name, cdi_device_ids=d.cdi_device_ids))
        return response

    def NodeUnprepareResources(self, request, context):
        if self.plugin.calls is not None:
            self.plugin.calls.record("NodeUnprepareResources", self.version, request.claims)
        errors = self.plugin.driver.unprepare([ClaimRef(c.namespace, c.uid, c.name) for c in request.claims])
        response = self.m.NodeUnprepareResourcesResponse()
        for uid, error in errors.items():
            response.claims[uid].error = error
        return response


class RegistrationService:
    def __init__(self, plugin: "KubeletPlugin") -> None:
        self.plugin = plugin

    def GetInfo(self, request, context):
        p = self.plugin
        if p.calls is not None and SELF_CHECK not in context.invocation_metadata():
            p.calls.record("GetInfo", "registration")
        return p.protos.registration.PluginInfo(type="DRAPlugin", name=p.config.driver, endpoint=str(p.config.dra_socket),
                                                supported_versions=list(SUPPORTED_VERSIONS))

    def NotifyRegistrationStatus(self, request, context):
        if self.plugin.calls is not None:
            self.plugin.calls.record("NotifyRegistrationStatus", "registration", registered=request.plugin_registered)
        self.plugin.registered = request.plugin_registered
        log(f"kubelet registration: {'registered' if request.plugin_registered else 'refused: ' + request.error}")
        return self.plugin.protos.registration.RegistrationStatusResponse()


class HealthService:
    """Streams every device of the node with its health (health_stream: as our taints judge it): sends when a
    device's health or the device list changes (looked at every POLL_S on a monitored node) and again every
    health interval, so the kubelet, which turns a device not reported for a while Unknown, keeps it current."""

    def __init__(self, plugin: "KubeletPlugin") -> None:
        self.plugin = plugin
        self._source: DeviceHealthSource | None = None
        self._lock = threading.Lock()

    def source(self) -> DeviceHealthSource:
        """The node's device health, its monitor started by the first stream (the kubelet opens one at registration)."""
        with self._lock:
            if self._source is None:
                p, cfg = self.plugin, self.plugin.config
                state_dir = cfg.state_dir.resolve() if cfg.state_dir else None
                self._source = DeviceHealthSource(cfg.node_name, node_mode(p._api(), cfg.node_name), state_dir,
                                                  cfg.nvml_lib_dir or library_dir(), lambda: driver_inventory(p.driver), cfg.faults,
                                                  cfg.health_interval)
            return self._source

    def NodeWatchResources(self, request, context):
        h = self.plugin.protos.health
        if self.plugin.calls is not None:
            self.plugin.calls.record("NodeWatchResources", "v1alpha1")
        source = self.source()
        pause = POLL_S if source.monitored else self.plugin.config.health_interval
        sent: list[tuple[str, bool]] | None = None
        sent_at = 0.0
        while context.is_active() and not self.plugin.stopping.is_set():
            health = source.health()
            if health != sent or time.monotonic() - sent_at >= self.plugin.config.health_interval:
                now = int(time.time())
                yield h.NodeWatchResourcesResponse(devices=[
                    h.DeviceHealth(device=h.DeviceIdentifier(pool_name=self.plugin.pool_name, device_name=name),
                                   health=h.HEALTHY if healthy else h.UNHEALTHY, last_updated_time=now)
                    for name, healthy in health])
                sent, sent_at = health, time.monotonic()
            self.plugin.stopping.wait(pause)

    def close(self) -> None:
        with self._lock:
            if self._source is not None:
                self._source.close()
                self._source = None


class KubeletPlugin:
    """Owns NVML, the checkpoint and both gRPC servers; start() serves, stop() cleans up."""

    def __init__(self, config: PluginConfig, environ: Mapping[str, str] | None = None) -> None:
        self.config = config
        self.pool_name = config.pool_name or config.node_name
        self.protos: KubeletProtos = load(config.k8s)
        self.stopping = threading.Event()
        self.registered: bool | None = None
        self._servers: list[grpc.Server] = []
        self._ready: ReadyServer | None = None
        self._nvml: Nvml | None = None
        self.calls: CallLog | None = CallLog.from_env(config.plugin_dir, config.node_name, environ)
        self.driver: Driver
        self.health: HealthService | None = None

    def start(self) -> None:
        cfg = self.config
        self._nvml = self._open_nvml()
        lib = cfg.host_lib_dir or (library_dir() if cfg.state_dir else None)  # a real node's containers get the library elsewhere
        host_state = cfg.host_state_dir or (cfg.state_dir.resolve() if cfg.state_dir else None)
        mounts = cdi.FakeNvmlMounts(lib, host_state)
        driver_root = None
        if cfg.state_dir is not None and host_state is not None:  # the fake node's driver root (a real node's is elsewhere)
            driver_root = cdi.DriverRootMounts.find(cfg.state_dir / DRIVER_ROOT_DIR, host_state / DRIVER_ROOT_DIR)
        api = self._api()
        mode = node_mode(api, cfg.node_name)
        shares = cfg.shares if cfg.shares_set else (mode.shares if mode else None)
        smi = cfg.state_dir / DRIVER_ROOT_DIR / SMI if cfg.state_dir is not None else None
        mps_root = cfg.plugin_dir / "mps"
        mps = MpsControl(api, cfg.node_name, cfg.namespace, mps_root, mps_root.resolve(), nvml_state=host_state)
        settings = DriverSettings(cfg.driver, self.pool_name, cfg.cdi_dir, mounts, cfg.mig_mode, cfg.faults, driver_root,
                                  shares=shares, dynamic_mig_node=mode is not None and mode.kind == "dynamic-mig",
                                  smi=NvidiaSmi(str(smi)) if smi is not None else NvidiaSmi(), mps=mps)
        checkpoint = Checkpoint(cfg.plugin_dir / CHECKPOINT)
        if "checkpoint-lost" not in cfg.faults:  # the fault: start as if nothing had been prepared here
            checkpoint.load()
        self.driver = Driver(settings, self._nvml, checkpoint, lambda ns, n: read_claim(api, ns, n), self._nvml_session)
        self.driver.status = DeviceStatusWriter(cfg.driver, self.pool_name, cfg.node_name, lambda ns, n: read_claim(api, ns, n),
                                                api_apply(api), log, cfg.faults)
        for d in (cfg.plugin_dir, cfg.registry_dir, cfg.cdi_dir):
            d.mkdir(parents=True, exist_ok=True)
        dra = self._server()
        for version, messages, grpc_mod in (("v1", self.protos.dra_v1, self.protos.dra_v1_grpc),
                                            ("v1beta1", self.protos.dra_v1beta1, self.protos.dra_v1beta1_grpc)):
            grpc_mod.add_DRAPluginServicer_to_server(DraService(self, messages, version), dra)
        self.health = HealthService(self)
        self.protos.health_grpc.add_DRAResourceHealthServicer_to_server(self.health, dra)
        self._serve(dra, cfg.dra_socket)
        # Registration last: the kubelet connects to the DRA socket as soon as it sees this one.
        reg = self._server()
        self.protos.registration_grpc.add_RegistrationServicer_to_server(RegistrationService(self), reg)
        self._serve(reg, cfg.registration_socket)
        if cfg.ready_port is not None:
            self._ready = ReadyServer(cfg.ready_port, self.not_ready).start()
        log(f"serving {cfg.driver} for node {cfg.node_name}: {cfg.dra_socket}, {cfg.registration_socket}"
            + (f"; consumable shares: {shares}" if shares else "") + (f"; faults: {', '.join(sorted(cfg.faults))}" if cfg.faults else ""))

    def _open_nvml(self) -> Nvml:
        """NVML on this node, held open for the plugin's life: the process is this node's alone (a plugin
        host, fake_gpus.driver.kubeletplugin.multinode, opens a session per call instead)."""
        load_library(self.config.nvml_lib_dir, self.config.state_dir)
        return Nvml.open()

    def _nvml_session(self) -> ContextManager[object]:
        """What the driver enters around each call to have NVML on this node: nothing, as _open_nvml holds it."""
        return nullcontext()

    def _api(self):
        """The API client this node's plugin reads claims and its Node with."""
        return api_client(self.config.kubeconfig)

    def not_ready(self) -> str | None:
        """Why the kubelet cannot use this plugin now (None: it can): not registered by the kubelet, a
        socket gone from the node, or a socket that no longer answers."""
        if self.registered is not True:
            return "the kubelet has not registered the plugin" + (" (it refused it)" if self.registered is False else "")
        for socket in (self.config.registration_socket, self.config.dra_socket):
            if not socket.is_socket():
                return f"{socket} is missing: the kubelet cannot reach the plugin"
        with grpc.insecure_channel(f"unix://{self.config.registration_socket}") as channel:
            try:
                self.protos.registration_grpc.RegistrationStub(channel).GetInfo(self.protos.registration.InfoRequest(), timeout=READY_CALL_SECONDS,
                                                                                metadata=(SELF_CHECK,))
            except grpc.RpcError as exc:
                return f"the registration socket does not answer GetInfo: {exc.code().name}"
        with grpc.insecure_channel(f"unix://{self.config.dra_socket}") as channel:
            try:
                grpc.channel_ready_future(channel).result(timeout=READY_CALL_SECONDS)
            except grpc.FutureTimeoutError:
                return f"the DRA socket {self.config.dra_socket} does not accept connections"
        return None

    def _server(self) -> grpc.Server:
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=8, thread_name_prefix="kubelet-plugin"))
        self._servers.append(server)
        return server

    def _serve(self, server: grpc.Server, socket: Path) -> None:
        socket.unlink(missing_ok=True)  # left by a plugin that was killed
        server.add_insecure_port(f"unix://{socket}")
        server.start()

    def hang(self, context) -> None:
        """Block a call until the caller gives up or the plugin stops (the prepare-hangs fault)."""
        done = threading.Event()
        context.add_callback(done.set)
        while not done.is_set() and not self.stopping.is_set():
            done.wait(1.0)

    def stop(self) -> None:
        self.stopping.set()
        if self._ready is not None:
            self._ready.stop()
            self._ready = None
        for server in reversed(self._servers):  # registration first: the kubelet stops calling
            server.stop(grace=2).wait()
        for socket in (self.config.registration_socket, self.config.dra_socket):
            socket.unlink(missing_ok=True)
        if self.health is not None:  # its monitor process, which would outlive a hosted node otherwise
            self.health.close()
        if self._nvml is not None:
            self._nvml.close()
            self._nvml = None
        log("stopped")



def node_mode(api, node: str) -> Mode | None:
    """The mode this node's labels give (fake_gpus.node's contract), None for a node without them or not found
    (a real node): its consumable shares and whether it offers dynamic MIG."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    try:
        labels = client.CoreV1Api(api).read_node(node, _request_timeout=30).metadata.labels
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise
    hardware = hardware_from_labels(labels)
    return hardware.mode if hardware else None
