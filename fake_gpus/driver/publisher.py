"""ResourceSlice publisher for simulated nodes: one fake-NVML state directory per node.

The driver half of the KWOK publisher process (fake_gpus/machine/kwok_publisher.py, which also plays the
nodes' hardware and hands its provisioning in) and of the kind DaemonSet's node publisher. It reads
every GPU through NVML only and publishes the slices. It watches Nodes: a labelled node that appears
gets state (from the provisioning it was given) and slices, a node that goes loses its slices; a node
whose NVML state changes is re-published at a new pool generation. A known node whose labels ask for
other hardware (an admin switched its mode) or that came back as a new Node object (its boards were
replaced) is provisioned afresh, as a MIG manager reconfigures a drained node, and re-published.

Node labels: dra-testbed.io/board, dra-testbed.io/gpu-count, dra-testbed.io/mode, dra-testbed.io/mig-layout;
nodes labelled dra-testbed.io/driver other than "ours" are another driver's (left alone).
"""

from __future__ import annotations

import hashlib
import json
import os
import queue
import shutil
import sys
import threading
import time
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from kubernetes import client, config, watch
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver import fabric_attach, rest
from fake_gpus.driver.claim_status import api_apply
from fake_gpus.driver.credentials import NodeTokens
from fake_gpus.driver.health_watch import ADDITIONAL_XIDS_ENV, HealthWatch, library_dir_of, tainted
from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.driver.nvml_adapter import InventoryError, NvmlLibrary, inventory
from fake_gpus.driver.paging import pages
from fake_gpus.driver.slices import ApiLimits
from fake_gpus.driver.state_changes import StateChanges
from fake_gpus.driver.stamping import StampedSlice, Stamper
from fake_gpus.node import Mode, NodeHardware, hardware_from_labels

DRIVER_LABEL = "dra-testbed.io/driver"  # "nvidia": NVIDIA's own plugin serves the node, not this publisher
POLL_SECONDS = 1.0  # how often state directories are checked for changes
STATE_FILES = ("gpus", "mig")  # the fake NVML's state in a node's directory, replaced whole on every change
WORKERS = 8  # concurrent API writes
MACHINE_WORKERS = 4  # threads making nodes' hardware files (first publish)
IN_FLIGHT = 256  # slices stamped but not yet written, at most (first publish)
NODES, SLICES = "/api/v1/nodes", "/apis/resource.k8s.io/v1/resourceslices"
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"  # every namespace's (the fabric-attach controller)
# makes a node's hardware in its state dir (the machine's part); fresh=True: remade as asked, nothing kept
Provision = Callable[..., object]


@dataclass(frozen=True)
class NodeConfig:
    """What a node's labels ask for."""

    name: str
    uid: str
    hardware: NodeHardware

    @property
    def board(self) -> str:
        return self.hardware.board

    @property
    def count(self) -> int:
        return self.hardware.count

    @property
    def mode(self) -> Mode:
        return self.hardware.mode


def node_config(node, serves: str = "ours") -> NodeConfig | None:
    """The GPU config of a Node object from its labels (the node contract's codec); None for nodes that
    carry no fake GPUs or that another driver serves. `serves`: the DRIVER_LABEL value of the nodes this
    publisher serves (a Helm release's fleet carries its own, so a bed's publisher and the release's never
    both publish one node)."""
    labels = node.metadata.labels or {}
    hardware = hardware_from_labels(labels)
    if hardware is None or labels.get(DRIVER_LABEL, "ours") != serves:
        return None
    return NodeConfig(node.metadata.name, node.metadata.uid, hardware)


def _state_stamp(state_dir: Path) -> tuple:
    """Changes whenever the fake NVML rewrites the node's state (files are replaced by rename)."""
    stamp = []
    for name in STATE_FILES:
        try:
            st = (state_dir / name).stat()
            stamp.append((st.st_ino, st.st_mtime_ns, st.st_size))
        except OSError:
            stamp.append(None)
    return tuple(stamp)


def spec_digest(spec: dict) -> str:
    """A slice spec's content, as the API returns it and as we stamp it (key order aside), in a few bytes."""
    return hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


class Publisher:
    """Keeps every labelled node's slices in line with its NVML state."""

    def __init__(self, api: client.ApiClient, nvml: NvmlLibrary, state_root: Path, provision: Provision | None,
                 identity: DriverIdentity, faults: frozenset[str], limits: ApiLimits,
                 credentials: NodeTokens | None = None, serves: str = "ours", classes: bool = True) -> None:
        self.api = api
        self.serves = serves  # the DRIVER_LABEL value of the nodes served (node_config)
        self.classes = classes  # False: the DeviceClasses are someone else's to make (a Helm chart's, NVIDIA's)
        self.credentials = credentials  # each node's slices written with that node's token (KWOK); None: `api`'s own
        self.slices = rest.lister(api, SLICES)
        self.list_nodes = rest.lister(api, NODES)
        self.nvml = nvml
        self.state_root = state_root
        self.provisioner = provision
        self.identity = identity
        self.faults = faults
        self.limits = limits
        self.nodes: dict[str, NodeConfig] = {}
        # node -> (generation, slice name -> digest of its text, None when its content is unknown)
        self.published: dict[str, tuple[int, dict[str, bytes | None]]] = {}
        self.stamper = Stamper(identity, limits, faults)  # slices per node shape, stamped per node
        self.found: dict[str, dict[str, str]] = {}  # node -> slice name -> spec digest, as a previous run left them
        self.stamps: dict[str, tuple] = {}
        self.changes = StateChanges(STATE_FILES)  # which nodes' stamps to compare at the next poll
        self.pool = ThreadPoolExecutor(WORKERS)
        self.stop = threading.Event()
        self.errors: list[str] = []
        self.started = False  # past the first publish: nodes seen from now on joined later
        # device health of nodes whose mode asks for it: a monitor process each, its taints on the devices
        self.health = HealthWatch(library_dir_of(nvml), identity.driver, os.environ.get(ADDITIONAL_XIDS_ENV, ""))
        self.attach_delay = fabric_attach.attach_delay(os.environ)  # fabric-attached GPUs (binding conditions); None: off

    # ----------------------------------------------------------------- hardware side
    def state_dir(self, node: str) -> Path:
        return self.state_root / node

    def provision(self, cfg: NodeConfig, fresh: bool = False) -> None:
        """Have the node's fake GPUs and OS views made and, in static mode, its MIG layout, when we were
        given the machine's part to play (KWOK); a node of a real kubelet brings its own (kind). `fresh`:
        the node's hardware changed, so nothing of its old state is kept (GPU UUIDs of the same boards are
        derived from the node, so a mode switch keeps them, as real GPUs do)."""
        if self.provisioner is None:
            return
        try:
            self.provisioner(self.state_dir(cfg.name), cfg.hardware, fresh=fresh)
        except ValueError as exc:  # one line naming the node, as the other start-up errors do
            raise ValueError(f"node {cfg.name}: {exc}") from exc

    # ----------------------------------------------------------------- driver side
    def desired(self, cfg: NodeConfig) -> list[StampedSlice]:
        """The node's slices from what NVML reports for it now."""
        try:
            inv = self.health.remember(cfg.name, inventory(self.nvml, self.state_dir(cfg.name)))
        except InventoryError:  # a lost GPU answers nothing: a monitored node's devices stay, tainted
            inv = self.health.last_inventory(cfg.name)
            if inv is None:
                raise
        stamped = self.stamper.stamp(cfg.name, cfg.uid, inv, cfg.mode)
        stamped = tainted(stamped, self.identity.driver, self.health.taints(cfg.name), self.faults, self.limits.taint_effect_none)
        return stamped if self.attach_delay is None else fabric_attach.with_binding_conditions(stamped)

    def sync(self, cfg: NodeConfig) -> list[Future]:
        """Publish the node's slices if they differ from what is published; returns the pending writes."""
        self.changes.watch(cfg.name, self.state_dir(cfg.name))  # before the stamp: no change falls between
        self.health.follow(cfg.name, cfg.mode, self.state_dir(cfg.name))
        self.stamps[cfg.name] = _state_stamp(self.state_dir(cfg.name))
        old_generation, old = self.published.get(cfg.name, (0, {}))
        if not old:  # a monitored node's devices are published once their health is watched, never before
            self.health.wait_reported(cfg.name)
        stamped = self.desired(cfg)
        digests = {s.name: s.digest for s in stamped}
        if old and digests == old:
            return []
        found = self.found.pop(cfg.name, None)
        if found and found == {s.name: spec_digest(json.loads(s.body(old_generation))["spec"]) for s in stamped}:
            self.published[cfg.name] = (old_generation, digests)  # what a previous run left is what we would write
            return []
        generation = old_generation + 1
        self.published[cfg.name] = (generation, digests)
        futures = [self.pool.submit(self._put, cfg.name, s.name, s.body(generation), s.name in old) for s in stamped]
        futures += [self.pool.submit(self._delete, cfg.name, name) for name in old if name not in digests]
        return futures

    def _send(self, method: str, path: str, node: str, body: bytes | None = None):
        """One request about `node`'s slices, its JSON body sent as it is (the generated client walks every
        dict of a body before encoding it, which costs more than the API server's own work for our large
        slices: see benchmarks/publish_scale.py). With node credentials it carries the node's token over
        their pool (no client certificate on it, which would authenticate first); else `api`'s own."""
        headers = {**self.api.default_headers, "Content-Type": "application/json", "Accept": "application/json"}
        if self.credentials is not None:
            cfg = self.credentials.api.configuration
            pool = self.credentials.api.rest_client.pool_manager
            known = self.nodes.get(node)
            headers["authorization"] = self.credentials.bearer(node, known.uid if known else None)
        else:
            cfg, pool = self.api.configuration, self.api.rest_client.pool_manager
            for setting in cfg.auth_settings().values():  # token from a kubeconfig or a service account alike
                if setting.get("in") == "header" and setting.get("value"):
                    headers[setting["key"]] = setting["value"]
        return pool.request(method, f"{cfg.host}{SLICES}{path}", body=body,
                            headers=headers, preload_content=True)

    @staticmethod
    def _check(response, *accepted: int) -> int:
        if response.status >= 300 and response.status not in accepted:
            raise ApiException(status=response.status, reason=response.reason, body=response.data.decode(errors="replace"))
        return response.status

    def _put(self, node: str, name: str, body: bytes, exists: bool) -> None:
        if not exists and self._check(self._send("POST", "", node, body), 409) != 409:
            return
        response = self._send("GET", f"/{name}", node)
        self._check(response)
        current = json.loads(response.data)
        replacement = json.loads(body)  # the rare path (a node's state changed): a decoded body is fine
        replacement["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
        self._check(self._send("PUT", f"/{name}", node, json.dumps(replacement).encode()))

    def _delete(self, node: str, name: str) -> None:
        self._check(self._send("DELETE", f"/{name}", node), 404)

    def _delete_gone(self, node: str, names: list[str]) -> None:
        """Delete the slices of a node that went. Its token went with it (a Node-bound token is refused once
        the Node is deleted, 401), as a kind node's driver goes with its node: then the garbage collector
        removes them, since each is owned by its Node."""
        try:
            for name in names:
                try:
                    self._delete(node, name)
                except ApiException as exc:
                    if not (self.credentials is not None and exc.status == 401):
                        raise
        except ApiException as exc:
            if not (self.credentials is not None and exc.status == 404):  # no token to be had for a node gone
                raise
        finally:
            if self.credentials is not None:
                self.credentials.forget(node)

    def forget(self, node: str) -> list[Future]:
        """The node went: remove its slices and its simulated hardware."""
        self.nodes.pop(node, None)
        self.stamps.pop(node, None)
        self.changes.unwatch(node)
        self.health.forget(node)  # before its state directory goes
        _, old = self.published.pop(node, (0, {}))
        shutil.rmtree(self.state_dir(node), ignore_errors=True)
        if "slices-outlive-node" in self.faults:
            return []
        return [self.pool.submit(self._delete_gone, node, list(old))] if old else []

    def settle(self, node: str, futures: list[Future]) -> None:
        """Wait for a node's writes; when one fails, forget what we believed published for that node,
        so the next poll writes again instead of finding nothing to do (e.g. RBAC not yet in force)."""
        try:
            for future in futures:
                future.result()
        except Exception:
            self.stamps.pop(node, None)
            self._guard(self.reload_published, node)
            raise

    def reload_published(self, node: str) -> None:
        """Believe published, for `node`, what the API holds, keeping the highest pool generation so
        generations only grow: the next sync leaves the pool alone when its slices are what it would write at
        that generation (`found`, as load_published does for a whole cluster: a kind node's driver restarted
        with nothing changed must not churn its pool), and rewrites it at a higher one otherwise."""
        generation, _ = self.published.get(node, (0, {}))
        specs: dict = {}
        found: dict[str, str] = {}
        for item in pages(self.slices, field_selector=f"spec.nodeName={node}"):
            if item["spec"]["driver"] == self.identity.driver:
                specs[item["metadata"]["name"]] = None
                found[item["metadata"]["name"]] = spec_digest(item["spec"])
                generation = max(generation, item["spec"]["pool"]["generation"])
        self.published[node] = (generation, specs)
        if found and "restart-churn" not in self.faults:
            self.found[node] = found
        else:
            self.found.pop(node, None)

    def load_published(self) -> None:
        """Pick up the pools a previous run published: a pool whose slices are what this run would publish
        at that generation is left alone (no rewrite, no new generation, `found`); any other is rewritten
        at a higher generation, so generations keep increasing."""
        churn = "restart-churn" in self.faults
        # paged and undecoded: a thousand nodes' slices are hundreds of MB
        for s in pages(self.slices, field_selector=f"spec.driver={self.identity.driver}"):
            node = s["spec"].get("nodeName") or ""
            generation, specs = self.published.get(node, (0, {}))
            specs[s["metadata"]["name"]] = None  # content unknown to the stamper
            if not churn:
                self.found.setdefault(node, {})[s["metadata"]["name"]] = spec_digest(s["spec"])
            self.published[node] = (max(generation, s["spec"]["pool"]["generation"]), specs)

    def _provisioned(self, cfg: NodeConfig) -> NodeConfig:
        self.provision(cfg)
        return cfg

    def add(self, node) -> list[Future]:
        """A node as listed or watched: new ones get hardware and slices, changed ones are remade."""
        cfg = node_config(node, self.serves)
        if cfg is None:
            return []
        known = self.nodes.get(cfg.name)
        if known is None:
            if self.started and "joined-node-unpublished" in self.faults:
                return []
            self.provision(cfg)
        elif known == cfg or "mode-switch-ignored" in self.faults and known.uid == cfg.uid:
            return []
        else:
            self.provision(cfg, fresh=True)
        self.nodes[cfg.name] = cfg
        return self.sync(cfg)

    def apply_classes(self) -> None:
        for body in self.identity.device_classes():
            if "class-selects-all" in self.faults and body["metadata"]["name"] == self.identity.gpu_class:
                body["spec"]["selectors"] = [{"cel": {"expression": f"device.driver == '{self.identity.driver}'"}}]
            rest.create(self.api, "/apis/resource.k8s.io/v1/deviceclasses", body, exist_ok=True)

    def initial(self) -> str:
        """Classes, then every labelled node; returns the node list's resourceVersion for the watch."""
        if self.classes:
            self.apply_classes()
        self.load_published()
        listing = rest.request(self.api, "GET", NODES, returns="V1NodeList")
        futures: list[Future] = []
        wanted = [c for c in (node_config(n, self.serves) for n in listing.items) if c is not None and c.name not in self.nodes]
        # The machine's part (files of every node's hardware and OS views) waits on the disk more than it
        # computes: made by a few threads ahead of the driver's part, in order, as the driver asks for them.
        with ThreadPoolExecutor(MACHINE_WORKERS) as machine:
            for cfg in machine.map(self._provisioned, wanted):
                self.nodes[cfg.name] = cfg
                futures += self.sync(cfg)
                if len(futures) > IN_FLIGHT:  # bounded: the bodies of thousands of nodes must not pile up in memory
                    for f in futures[:IN_FLIGHT // 2]:
                        f.result()
                    futures = futures[IN_FLIGHT // 2:]
        present = {n.metadata.name for n in listing.items}
        for gone in [n for n in self.published if n not in present]:
            futures += self.forget(gone)
        for f in futures:
            f.result()
        return listing.metadata.resource_version

    # ----------------------------------------------------------------- loop
    def _watch_nodes(self, events: queue.Queue, resource_version: str) -> None:
        while not self.stop.is_set():
            stream = watch.Watch(return_type="V1Node")
            try:
                for event in stream.stream(self.list_nodes, resource_version=resource_version, timeout_seconds=60):
                    resource_version = event["object"].metadata.resource_version
                    events.put((event["type"], event["object"]))
                    if self.stop.is_set():
                        break
            except ApiException as exc:
                if exc.status == 410:  # expired: relist and report everything as current
                    listing = rest.request(self.api, "GET", NODES, returns="V1NodeList")
                    resource_version = listing.metadata.resource_version
                    events.put(("RELIST", listing.items))
                else:
                    time.sleep(1)
            except Exception:  # noqa: BLE001 - connection drops: the watch is restarted
                time.sleep(1)
            finally:
                stream.stop()

    def handle(self, kind: str, obj) -> None:
        if kind == "DELETED":
            for f in self.forget(obj.metadata.name):
                f.result()
        elif kind == "RELIST":
            present = {n.metadata.name for n in obj}
            for gone in [n for n in self.nodes if n not in present]:
                for f in self.forget(gone):
                    f.result()
            for node in obj:
                self.handle("ADDED", node)
        else:
            self.settle(obj.metadata.name, self.add(obj))

    def run(self, ready_file: Path | None) -> None:
        resource_version = self.initial()
        self.started = True
        if self.attach_delay is not None:  # the fabric manager: attaches what the scheduler waits for
            fabric_attach.AttachController(self.identity.driver, self.attach_delay, lambda: pages(rest.lister(self.api, CLAIMS)),
                                           api_apply(self.api), self.faults).start(self.stop)
        if ready_file:
            ready_file.write_text(f"{os.getpid()}\n")
        events: queue.Queue = queue.Queue()
        threading.Thread(target=self._watch_nodes, args=(events, resource_version), daemon=True).start()
        next_poll = time.monotonic() + POLL_SECONDS
        while not self.stop.is_set():
            try:
                kind, obj = events.get(timeout=max(0.05, next_poll - time.monotonic()))
                self._guard(self.handle, kind, obj)
            except queue.Empty:
                pass
            if time.monotonic() >= next_poll:
                # nodes whose state changed, those whose last writes failed (no stamp: written again), and
                # those whose device taints changed
                sick = self.health.changed()
                for name in self.changes.changed() | (self.nodes.keys() - self.stamps.keys()) | sick:
                    cfg = self.nodes.get(name)
                    if cfg is not None and (name in sick or _state_stamp(self.state_dir(name)) != self.stamps.get(name)):
                        self._guard(lambda c=cfg: self.settle(c.name, self.sync(c)))
                next_poll = time.monotonic() + POLL_SECONDS
        self.changes.close()
        self.health.close()

    def _guard(self, fn, *args) -> None:
        """Errors after start-up are logged, never fatal: one bad node must not stop the others."""
        try:
            fn(*args)
        except Exception as exc:  # noqa: BLE001
            print(f"publisher: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}", file=sys.stderr, flush=True)


def connect(kubeconfig: Path, timeout: float = 300.0) -> tuple[client.ApiClient, object]:
    """An API client and the server version, once `kubeconfig` exists and its apiserver answers.

    `up` starts the publisher while the control plane is still coming up, to overlap their start-ups."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            api = config.new_client_from_config(config_file=str(kubeconfig))
            return api, client.VersionApi(api).get_code()
        except Exception:  # noqa: BLE001 - not there yet: no file, no listener, not ready
            if time.monotonic() > deadline:
                raise
            time.sleep(0.1)
