"""What the kubelet's DRA manager does for one node, against a plugin's real sockets.

Registration as the kubelet's plugin watcher does it: GetInfo on `<registry>/<driver>-reg.sock`, check
the plugin offers a DRA version we speak, dial the endpoint it names, NotifyRegistrationStatus. Pods as
the DRA manager handles them: the claims of a pod (its own ResourceClaims, or the ones generated from
templates, named in the pod's status), each read from the API and grouped per driver, prepared in one
NodePrepareResources call per driver before the pod may start, unprepared in one NodeUnprepareResources
call per driver once the pod is gone. Like the kubelet's claim info cache (pkg/kubelet/cm/dra/manager.go),
a claim is prepared once however many pods of the node use it (a pod arriving at a prepared claim makes no
call), stays prepared until the last of them is gone, and is unprepared even if its prepare failed: the
pod's reference is taken before the call, so a plugin can undo a prepare that failed half-way.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kubernetes import client

from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId, KubeletClient
from testbed.kubelet.health import STREAM_DEADLINE_S, HealthStream, PreparedDevice

SERVICES = ("v1.DRAPlugin", "v1beta1.DRAPlugin")  # what a 1.34 kubelet accepts


class PrepareError(RuntimeError):
    """The plugin refused or failed a call; the message is what the kubelet's event would say."""


@dataclass
class StandInKubelet:
    """One node's kubelet, DRA side, for one driver's plugin."""

    node: str
    driver: str
    registry_dir: Path
    minor: str = "1.34"
    timeout: float = 60.0
    version: str = "v1"
    users: dict[str, set[str]] = field(default_factory=dict)  # claim uid -> pods (namespace/name) of the node using it
    claims: dict[str, ClaimId] = field(default_factory=dict)  # claim uid -> the claim, for unprepare
    prepared: dict[str, list[str]] = field(default_factory=dict)  # claim uid -> its CDI device ids, once prepared
    devices: dict[str, list[PreparedDevice]] = field(default_factory=dict)  # claim uid -> its devices, once prepared
    health: HealthStream | None = None  # the plugin's health stream, while followed (testbed.kubelet.health)
    _client: KubeletClient | None = None

    def register(self) -> str:
        """GetInfo, dial its endpoint, NotifyRegistrationStatus; returns the DRA version chosen."""
        socket = self.registry_dir / f"{self.driver}-reg.sock"
        self._client = KubeletClient(socket, None, self.minor, self.timeout)
        info = self._client.get_info()
        if info.name != self.driver:
            self._client.notify_registered(False, f"plugin name {info.name!r}, expected {self.driver!r}")
            raise PrepareError(f"plugin at {socket} calls itself {info.name!r}, not {self.driver!r}")
        offered = list(info.supported_versions)
        chosen = choose_service(offered)
        if chosen is None:
            self._client.notify_registered(False, f"none of {list(SERVICES)} offered (offered: {offered})")
            raise PrepareError(f"plugin {self.driver} offers {offered}; this kubelet speaks {list(SERVICES)}")
        self.version = chosen.split(".")[0]
        self._client.connect(info.endpoint)
        self._client.notify_registered(True)
        return self.version

    def follow_health(self, on_change) -> None:
        """Open the plugin's health stream (NodeWatchResources), as the kubelet does once it registered it, and
        keep its last word per device; `on_change()` runs on the stream's thread whenever a device's health changed."""
        assert self._client is not None, "register() first"
        client_ = self._client
        self.health = HealthStream(lambda: client_.watch_health(timeout=STREAM_DEADLINE_S), on_change).start()

    def devices_of(self, namespace: str, claim: str) -> list[PreparedDevice] | None:
        """The devices prepared for ResourceClaim `namespace/claim` (None: not prepared on this node)."""
        uid = next((u for u, c in self.claims.items() if (c.namespace, c.name) == (namespace, claim)), None)
        return self.devices.get(uid) if uid is not None else None

    def close(self) -> None:
        if self.health is not None:
            self.health.stop()
            self.health = None
        if self._client is not None:
            self._client.close()
            self._client = None

    def claims_of(self, api: client.ApiClient, pod) -> list[ClaimId]:
        """The pod's ResourceClaims allocated by this driver, as the DRA manager finds them."""
        resource = client.ResourceV1Api(api)
        out = []
        for name in claim_names(pod):
            claim = resource.read_namespaced_resource_claim(name, pod.metadata.namespace)
            allocation = claim.status.allocation if claim.status else None
            if allocation is None:
                raise PrepareError(f"claim {pod.metadata.namespace}/{name} is not allocated")
            reserved = {r.uid for r in (claim.status.reserved_for or [])}
            if pod.metadata.uid not in reserved:
                raise PrepareError(f"claim {pod.metadata.namespace}/{name} is not reserved for pod {pod.metadata.name}")
            if any(r.driver == self.driver for r in allocation.devices.results or []):
                out.append(ClaimId(pod.metadata.namespace, claim.metadata.uid, name))
        return out

    def prepare_pod(self, api: client.ApiClient, pod) -> dict:
        """NodePrepareResources for the pod's claims of this driver not prepared yet; returns claim uid -> CDI
        device ids of all its claims."""
        assert self._client is not None, "register() first"
        claims = self.claims_of(api, pod)
        key = f"{pod.metadata.namespace}/{pod.metadata.name}"
        for claim in claims:  # the pod's reference first, kept if the call fails (the kubelet checkpoints it so)
            self.users.setdefault(claim.uid, set()).add(key)
            self.claims[claim.uid] = claim
        todo = [c for c in claims if c.uid not in self.prepared]
        if todo:
            response = self._client.prepare(todo, self.version, self.timeout)
            for claim in todo:
                result = response.claims.get(claim.uid)
                if result is None:
                    raise PrepareError(f"NodePrepareResources: no result for claim {claim.namespace}/{claim.name}")
                if result.error:
                    raise PrepareError(f"NodePrepareResources failed for claim {claim.namespace}/{claim.name}: {result.error}")
                self.prepared[claim.uid] = [cdi for d in result.devices for cdi in d.cdi_device_ids]
                self.devices[claim.uid] = [PreparedDevice(d.pool_name, d.device_name, tuple(d.cdi_device_ids)) for d in result.devices]
        return {c.uid: self.prepared[c.uid] for c in claims}

    def unprepare_pod(self, pod_key: str) -> list[str]:
        """NodeUnprepareResources for claims no other pod of the node still uses; returns their uids."""
        self.release(pod_key)
        return self.unprepare_unused()

    def release(self, pod_key: str) -> None:
        """The pod no longer uses its claims (they stay prepared until unprepare_unused succeeds)."""
        for pods in self.users.values():
            pods.discard(pod_key)

    def unused(self) -> list[str]:
        """Uids of claims, prepared or whose prepare was tried, that no pod of the node uses."""
        return [uid for uid, pods in self.users.items() if not pods]

    def unprepare_unused(self) -> list[str]:
        """NodeUnprepareResources for every prepared claim no pod uses; returns their uids. A claim that
        fails stays prepared (the caller retries), as the kubelet's claim cache keeps it."""
        assert self._client is not None, "register() first"
        done = self.unused()
        if not done:
            return []
        response = self._client.unprepare([self.claims[u] for u in done], self.version, self.timeout)
        for uid in done:
            result = response.claims.get(uid)
            if result is None or result.error:
                raise PrepareError(f"NodeUnprepareResources failed for claim {uid}: {result.error if result else 'no result'}")
            del self.users[uid]
            del self.claims[uid]
            self.prepared.pop(uid, None)
            self.devices.pop(uid, None)
        return done


def claim_names(pod) -> list[str]:
    """Names of the pod's ResourceClaims in the kubelet's order: its own, then the one the scheduler made for
    its extended resources (DRAExtendedResource: `nvidia.com/gpu: 1` served by a DeviceClass); PrepareError
    for a template's claim not generated yet."""
    # resourceclaim.Name: a template's claim is named in the pod's status; an entry without a name says
    # the pod needs no claim there (nothing to prepare), no entry says the claim is not generated yet
    statuses = {s.name: s.resource_claim_name for s in (pod.status.resource_claim_statuses or [])}
    names = []
    for ref in pod.spec.resource_claims or []:
        if not ref.resource_claim_name and ref.name in statuses and not statuses[ref.name]:
            continue
        name = ref.resource_claim_name or statuses.get(ref.name)
        if not name:
            raise PrepareError(f"pod {pod.metadata.namespace}/{pod.metadata.name}: claim {ref.name} has no ResourceClaim yet")
        names.append(name)
    return names + ([extended] if (extended := extended_claim(pod)) else [])


def extended_claim(pod) -> str | None:
    """The claim the scheduler made for the pod's extended resources, if any."""
    status = getattr(pod.status, "extended_resource_claim_status", None)  # kubernetes >= 34 has the field
    return status.resource_claim_name if status is not None else None


def holds_claims(pod) -> bool:
    """Whether the kubelet must prepare something for the pod before it runs."""
    return bool(pod.spec.resource_claims) or extended_claim(pod) is not None


def choose_service(offered: list[str]) -> str | None:
    """The DRA service to call: the first the plugin offers that the kubelet speaks (the plugin's order wins,
    as in the kubelet's validateSupportedServices), None if there is none."""
    return next((s for s in offered if s in SERVICES), None)
