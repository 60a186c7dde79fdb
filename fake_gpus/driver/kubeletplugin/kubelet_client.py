"""A client speaking to the plugin the way the kubelet does, over the same unix sockets and stubs."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import grpc

from fake_gpus.driver.kubeletplugin.protos import KubeletProtos, load
from hostenv.versions import DEFAULT_MINOR


@dataclass(frozen=True)
class ClaimId:
    namespace: str
    uid: str
    name: str


class KubeletClient:
    """Registration, DRA (v1 or v1beta1) and health calls; close() releases both channels."""

    def __init__(self, registration_socket: Path, dra_socket: Path | None = None, minor: str = DEFAULT_MINOR,
                 timeout: float = 60.0) -> None:
        self.protos: KubeletProtos = load(minor)
        self.timeout = timeout
        self._reg = grpc.insecure_channel(f"unix://{registration_socket}")
        self._dra = grpc.insecure_channel(f"unix://{dra_socket}") if dra_socket else None

    def close(self) -> None:
        self._reg.close()
        if self._dra is not None:
            self._dra.close()

    def __enter__(self) -> "KubeletClient":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def get_info(self, wait_for_ready: bool = True):
        stub = self.protos.registration_grpc.RegistrationStub(self._reg)
        return stub.GetInfo(self.protos.registration.InfoRequest(), timeout=self.timeout, wait_for_ready=wait_for_ready)

    def notify_registered(self, ok: bool = True, error: str = "") -> None:
        stub = self.protos.registration_grpc.RegistrationStub(self._reg)
        stub.NotifyRegistrationStatus(self.protos.registration.RegistrationStatus(plugin_registered=ok, error=error), timeout=self.timeout)

    def connect(self, endpoint: str) -> None:
        """Open the DRA channel at the endpoint GetInfo named (what the kubelet does)."""
        if self._dra is not None:
            self._dra.close()
        self._dra = grpc.insecure_channel(f"unix://{endpoint}")

    def _dra_stub(self, version: str):
        assert self._dra is not None, "no DRA endpoint: call connect() with GetInfo's endpoint"
        mod = {"v1": self.protos.dra_v1_grpc, "v1beta1": self.protos.dra_v1beta1_grpc}[version]
        return mod.DRAPluginStub(self._dra)

    def _messages(self, version: str):
        return {"v1": self.protos.dra_v1, "v1beta1": self.protos.dra_v1beta1}[version]

    def prepare(self, claims: list[ClaimId], version: str = "v1", timeout: float | None = None):
        m = self._messages(version)
        request = m.NodePrepareResourcesRequest(claims=[m.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims])
        return self._dra_stub(version).NodePrepareResources(request, timeout=timeout or self.timeout, wait_for_ready=True)

    def unprepare(self, claims: list[ClaimId], version: str = "v1", timeout: float | None = None):
        m = self._messages(version)
        request = m.NodeUnprepareResourcesRequest(claims=[m.Claim(namespace=c.namespace, uid=c.uid, name=c.name) for c in claims])
        return self._dra_stub(version).NodeUnprepareResources(request, timeout=timeout or self.timeout, wait_for_ready=True)

    def watch_health(self, timeout: float | None = None):
        """The health stream (an iterator of NodeWatchResourcesResponse); cancel() it when done."""
        assert self._dra is not None
        stub = self.protos.health_grpc.DRAResourceHealthStub(self._dra)
        return stub.NodeWatchResources(self.protos.health.NodeWatchResourcesRequest(), timeout=timeout or self.timeout, wait_for_ready=True)
