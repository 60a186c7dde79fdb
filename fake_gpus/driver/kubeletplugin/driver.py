"""Prepare and unprepare claims: NVML changes, CDI specs and the checkpoint, independent of gRPC versions.

Every call is serialized under one lock: NVML's GPU- and compute-instance steps are not atomic, and
the checkpoint must describe exactly what exists whenever the process dies.
"""

from __future__ import annotations

import threading
from contextlib import nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, ContextManager

import pynvml

from fake_gpus.driver.identity import parse_device_name
from fake_gpus.driver.kubeletplugin import MIG_DYNAMIC, MIG_STATIC, cdi, gpuconfig
from fake_gpus.driver.kubeletplugin.checkpoint import PREPARED, PREPARING, Checkpoint, ClaimRecord, GroupRecord, MigRecord, PreparedDevice
from fake_gpus.driver.kubeletplugin.claims import AllocatedDevice, ClaimError, allocated_devices
from fake_gpus.driver.kubeletplugin.device_status import ClaimId, DeviceStatusWriter
from fake_gpus.driver.kubeletplugin.strategies import MpsControl, NvidiaSmi, StrategyError, mps_daemon_id
from fake_gpus.driver.nvml_adapter import DeviceError, MigDevice, Nvml, Placement


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    uid: str
    name: str


@dataclass
class PrepareResult:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


@dataclass(frozen=True)
class DriverSettings:
    driver: str
    pool_name: str
    cdi_dir: Path
    mounts: cdi.FakeNvmlMounts
    mig_mode: str = MIG_DYNAMIC
    faults: frozenset[str] = frozenset()
    driver_root: cdi.DriverRootMounts | None = None
    shares: str | None = None  # NVIDIA's --consumable-shares value (None: disabled): several claims may hold a device
    dynamic_mig_node: bool = False  # the node offers dynamic MIG (NVIDIA's DynamicMIG gate), where MPS is refused
    smi: NvidiaSmi = NvidiaSmi()
    mps: MpsControl | None = None


SHARING_IGNORED = "sharing-ignored"  # fault switch: prepare applies no sharing strategy
MPS_LIMITS_IGNORED = "mps-limits-ignored"  # fault switch: the MPS daemon gets none of the claim's limits
MPS_DAEMON_LEFT_BEHIND = "mps-daemon-left-behind"  # fault switch: unprepare leaves the MPS daemon running


@dataclass
class _Planned:
    """A device resolved against NVML, before any change."""

    device: str
    request_names: list[str]
    gpu_uuid: str
    mig: MigRecord | None = None
    existing: MigDevice | None = None
    adopt: bool = False  # an instance a crashed earlier attempt of this claim created
    shared_created: bool = False  # an instance the plugin created for another claim that shares it (consumable shares)
    sharing: gpuconfig.Sharing | None = None


class Driver:
    """The plugin's state machine over NVML, the CDI directory and the checkpoint."""

    def __init__(self, settings: DriverSettings, nvml: Nvml, checkpoint: Checkpoint,
                 read_claim: Callable[[str, str], dict],
                 session: Callable[[], ContextManager[object]] = nullcontext) -> None:
        self.settings = settings
        self.nvml = nvml
        # NVML open on this node for one call: a plugin of its own process holds one session for its life
        # (nothing to open), a node of a plugin host opens one per call (pynvml is process-global)
        self.session = session
        self.checkpoint = checkpoint
        self.read_claim = read_claim
        self.lock = threading.Lock()
        self.status: DeviceStatusWriter | None = None  # reports prepared devices in the claim's status.devices

    # --- prepare ---

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        return {ref.uid: self._prepare_guarded(ref) for ref in claims}

    def _prepare_guarded(self, ref: ClaimRef) -> PrepareResult:
        if "prepare-fails" in self.settings.faults:
            return PrepareResult(error=f"claim {ref.namespace}/{ref.name}: injected fault prepare-fails")
        try:
            with self.lock, self.session():
                devices = self._prepare(ref)
            if self.status is not None:  # outside the lock: an API call that changes nothing on the node
                self.status.prepared(ClaimId(ref.namespace, ref.name, ref.uid), devices)
            return PrepareResult(devices=devices)
        except (ClaimError, DeviceError, ValueError, StrategyError, pynvml.NVMLError) as exc:
            return PrepareResult(error=f"claim {ref.namespace}/{ref.name}: {exc}")
        except Exception as exc:  # noqa: BLE001 - one bad claim must never take the plugin down
            return PrepareResult(error=f"claim {ref.namespace}/{ref.name}: internal error: {type(exc).__name__}: {exc}")

    def _prepare(self, ref: ClaimRef) -> list[PreparedDevice]:
        record = self.checkpoint.claims.get(ref.uid)
        if record is not None and record.state == PREPARED:
            self._write_cdi(ref.uid, record)  # idempotent; restores a spec someone removed
            return record.devices
        claim = self.read_claim(ref.namespace, ref.name)
        allocated = allocated_devices(claim, ref.uid, self.settings.driver, self.settings.pool_name)
        admin = {a.device for a in allocated if a.admin}
        plans = [self._plan(ref.uid, device, requests, record, device in admin) for device, requests in _by_device(allocated).items()]
        groups = self._configure(ref.uid, claim, plans, admin)
        if record is not None and record.groups:  # a crashed earlier attempt's strategies: undone before applying again
            self._undo_groups(ref.uid, record.groups)
        record = ClaimRecord(ref.namespace, ref.name, PREPARING, planned=[p.mig for p in plans if p.mig and (p.existing is None or p.adopt)],
                             groups=[GroupRecord([p.device for p in g]) for g in groups])
        self.checkpoint.claims[ref.uid] = record
        self.checkpoint.save()  # before creating anything: a crash from here on leaks nothing
        created: list[MigDevice] = []
        try:
            if SHARING_IGNORED not in self.settings.faults:  # the fault: every device used as is
                for plans_of, state in zip(groups, record.groups):
                    self._apply(ref.uid, plans_of, state)
            devices = [self._realize(ref.uid, plan, created) for plan in plans]
        except BaseException:
            # undo this attempt, including instances adopted from a crashed earlier one: nothing stays unowned
            for inst in created + [p.existing for p in plans if p.adopt and p.existing is not None]:
                self.nvml.destroy_instance(inst)
            self._undo_groups(ref.uid, record.groups)
            del self.checkpoint.claims[ref.uid]
            self.checkpoint.save()
            raise
        record.devices, record.planned, record.state = devices, [], PREPARED
        record.cdi_spec = cdi.spec_file_name(self.settings.driver, ref.uid)
        self._write_cdi(ref.uid, record)
        self.checkpoint.save()
        return devices

    def _plan(self, uid: str, device: str, requests: list[str], record: ClaimRecord | None, admin: bool = False) -> _Planned:
        """Resolve a device name against NVML; DeviceError when the node has no such device (any more)."""
        try:
            ref = parse_device_name(device)
        except ValueError as exc:
            raise DeviceError(str(exc)) from exc
        handle, profile, size = self.nvml.resolve(ref)
        gpu_uuid = _s(pynvml.nvmlDeviceGetUUID(handle))
        if profile is None:
            # the fault: a whole GPU treated as exclusive against admin access, so an admin-access claim on a
            # held GPU is refused (only admin claims: another claim may meet a predecessor not unprepared yet)
            owner = self._owner(gpu_uuid, device, uid) if admin and "admin-access-refused" in self.settings.faults else None
            if owner:
                raise DeviceError(f"device {device} is already prepared for claim {owner}")
            return _Planned(device, requests, gpu_uuid)
        assert ref.start is not None and size is not None
        mig = MigRecord(gpu_uuid, profile.id, ref.start, size)
        existing = self.nvml.find_instance(handle, profile, ref.start, size)
        adopt = existing is not None and record is not None and record.state == PREPARING and any(
            (m.gpu_uuid, m.profile_id, m.start, m.size) == (gpu_uuid, profile.id, ref.start, size) for m in record.planned)
        shared_created = False
        if existing is not None and not adopt:
            owner = self._owner(gpu_uuid, device, uid)
            if owner and not self.settings.shares:
                raise DeviceError(f"device {device} is still prepared for claim {owner}")
            # consumable shares: the instance another claim holds is this claim's too (the configs were compared)
            shared_created = bool(owner) and any(d.device_name == device and d.created for d in self._holders(uid, device))
        if existing is None and self.settings.mig_mode == MIG_STATIC:
            raise DeviceError(f"MIG device {device} does not exist on this node")
        return _Planned(device, requests, gpu_uuid, mig, existing, adopt, shared_created)

    def _owner(self, gpu_uuid: str, device: str, uid: str) -> str | None:
        """The other claim this device is prepared for, if any."""
        for other_uid, rec in self.checkpoint.claims.items():
            if other_uid != uid and any(d.device_name == device for d in rec.devices):
                return f"{rec.namespace}/{rec.name} ({other_uid})"
        return None

    def _realize(self, uid: str, plan: _Planned, created: list[MigDevice]) -> PreparedDevice:
        """Create what the plan lacks in NVML and describe the prepared device."""
        cdi_ids = [cdi.cdi_device_id(self.settings.driver, uid, plan.device)]
        device = PreparedDevice(plan.request_names, self.settings.pool_name, plan.device, cdi_ids, visible_uuid=plan.gpu_uuid,
                                config=plan.sharing.canonical() if plan.sharing else None)
        if plan.mig is None:
            return device
        inst = plan.existing
        if inst is None:
            ref = parse_device_name(plan.device)
            handle, profile, _size = self.nvml.resolve(ref)
            inst = self.nvml.create_instance(handle, profile, plan.mig.start, plan.mig.size)
            created.append(inst)
        device.mig = MigRecord(inst.gpu_uuid, inst.profile_id, inst.start, inst.size, inst.gi_id, inst.ci_id, inst.uuid)
        device.created = plan.existing is None or plan.adopt or plan.shared_created
        device.visible_uuid = inst.uuid
        return device

    def _write_cdi(self, uid: str, record: ClaimRecord) -> None:
        entries = [(d.device_name, self._visible(d, record.devices), self._nodes(d, record.devices)) for d in record.devices]
        extra = {name: self.settings.mps.container_edits(g.mps_daemon) for g in record.groups if g.mps_daemon and self.settings.mps
                 for name in g.devices}
        spec = cdi.build_spec(self.settings.driver, uid, entries, self.settings.mounts, self.settings.driver_root, extra)
        cdi.write_spec(self.settings.cdi_dir, cdi.spec_file_name(self.settings.driver, uid), spec)

    def _visible(self, device: PreparedDevice, devices: list[PreparedDevice]) -> str:
        """NVIDIA_VISIBLE_DEVICES of a device: every device of the claim sharing a request with it.

        A container always gets all devices of a request, so they must all be visible together."""
        group = [d for d in devices if set(d.request_names) & set(device.request_names)]
        uuids = [self._wrong(d) if "cdi-wrong-device" in self.settings.faults else d.visible_uuid for d in group]
        if "cdi-all-devices" in self.settings.faults and device.mig is None:  # the fault: every GPU of the node
            uuids = [self.nvml.gpu_uuid(minor) for minor in self.nvml.minors()]
        return ",".join(uuids)

    def _nodes(self, device: PreparedDevice, devices: list[PreparedDevice]) -> cdi.DeviceNodes:
        """The device nodes of a device's request group (see _visible); for the cdi-wrong-device fault the
        next GPU's node for a whole GPU and the parent alone for a MIG device; for cdi-all-devices every
        GPU's node (in a container NVML shows what the device nodes open, so the fault must hand them out)."""
        from fake_gpus.nvml.capabilities import caps_minor

        group = [d for d in devices if set(d.request_names) & set(device.request_names)]
        wrong = "cdi-wrong-device" in self.settings.faults
        gpus, caps = [], []
        for d in group:
            minor = parse_device_name(d.device_name).minor
            if wrong and d.mig is None:
                minors = self.nvml.minors()
                minor = minors[(minors.index(minor) + 1) % len(minors)]
            gpus.append(minor)
            if d.mig is not None and not wrong:
                caps += [caps_minor(minor, d.mig.gi_id), caps_minor(minor, d.mig.gi_id, d.mig.ci_id)]
        if "cdi-all-devices" in self.settings.faults and device.mig is None:  # as in _visible
            gpus += self.nvml.minors()
        return cdi.DeviceNodes(tuple(sorted(set(gpus))), tuple(caps))

    def _wrong(self, device: PreparedDevice) -> str:
        """For the cdi-wrong-device fault: the parent GPU of a MIG device, the next GPU for a whole GPU."""
        if device.mig is not None:
            return device.mig.gpu_uuid
        minors = self.nvml.minors()
        minor = parse_device_name(device.device_name).minor
        return self.nvml.gpu_uuid(minors[(minors.index(minor) + 1) % len(minors)])

    # --- unprepare ---

    def unprepare(self, claims: list[ClaimRef]) -> dict[str, str]:
        """Errors by claim UID ('' = done); a claim this plugin never prepared is done."""
        return {ref.uid: self._unprepare_guarded(ref) for ref in claims}

    def _unprepare_guarded(self, ref: ClaimRef) -> str:
        try:
            with self.lock, self.session():
                self._unprepare(ref.uid)
            if self.status is not None:
                self.status.unprepared(ClaimId(ref.namespace, ref.name, ref.uid))
            return ""
        except (DeviceError, StrategyError, pynvml.NVMLError, OSError) as exc:
            return f"claim {ref.namespace}/{ref.name}: {exc}"
        except Exception as exc:  # noqa: BLE001
            return f"claim {ref.namespace}/{ref.name}: internal error: {type(exc).__name__}: {exc}"

    def _unprepare(self, uid: str) -> None:
        record = self.checkpoint.claims.get(uid)
        if record is None:
            return
        if "unprepare-leaks" not in self.settings.faults:
            for device in record.devices:
                if device.created and device.mig is not None and not (self.settings.shares and self._holders(uid, device.device_name)):
                    self.nvml.destroy_instance(_instance(device.mig))
            for mig in record.planned:  # a prepare that died half-way: whatever it made at its placements
                self._destroy_at(mig)
        self._undo_groups(uid, record.groups)
        cdi.remove_spec(self.settings.cdi_dir, record.cdi_spec or cdi.spec_file_name(self.settings.driver, uid))
        del self.checkpoint.claims[uid]
        self.checkpoint.save()

    # --- sharing (opaque configs, consumable shares) ---

    def _configure(self, uid: str, claim: dict, plans: list[_Planned], admin: set[str]) -> list[list[_Planned]]:
        """Each device's normalized config (NVIDIA's precedence and checks), the conflict check against claims that
        share a device, and the devices grouped by the config that applies to them (one strategy per group)."""
        allocation = claim["status"]["allocation"]
        try:
            configs = gpuconfig.opaque_configs(allocation, self.settings.driver)
            chosen = [gpuconfig.config_for(configs, p.device, gpuconfig.GPU if p.mig is None else gpuconfig.MIG, p.request_names[0])
                      for p in plans]
        except gpuconfig.ConfigError as exc:
            raise gpuconfig.ConfigError(f"prepare devices failed: {exc}") from exc
        groups: dict[int, list[_Planned]] = {}
        for plan, config in zip(plans, chosen):
            try:
                plan.sharing = gpuconfig.normalize(config, gpuconfig.GPU if plan.mig is None else gpuconfig.MIG)
            except gpuconfig.ConfigError as exc:
                raise gpuconfig.ConfigError(f"prepare devices failed: error validating GPU config: {exc}") from exc
            # the defaults (no config) of GPUs and of MIG devices are two groups, as NVIDIA's two default configs
            groups.setdefault(id(config) if config else (0 if plan.mig is None else 1), []).append(plan)
        if self.settings.shares:
            for plan in plans:
                if plan.device in admin:
                    continue  # admin access never conflicts
                for other_uid, rec in self.checkpoint.claims.items():
                    held = [d for d in rec.devices if d.device_name == plan.device] if other_uid != uid and rec.state == PREPARED else []
                    if held and held[0].config != plan.sharing.canonical():
                        raise ClaimError(f"unable to prepare claim {uid}: requested device {plan.device} has conflicting configuration "
                                         f"with already prepared claim {other_uid}")
        return list(groups.values())

    def _apply(self, uid: str, plans: list[_Planned], state: GroupRecord) -> None:
        """A group's strategy on the node, recorded in `state` step by step (saved: a crash leaves it undoable)."""
        sharing = plans[0].sharing
        assert sharing is not None
        requests = "[" + " ".join(sorted({r for p in plans for r in p.request_names})) + "]"
        gpus = sorted(p.gpu_uuid for p in plans if p.mig is None)
        try:
            interval = gpuconfig.check_time_slicing(sharing)
        except gpuconfig.ConfigError as exc:
            raise StrategyError(f"prepare devices failed: error applying config: error getting timeslice config for requests "
                                f"'{requests}' in claim '{uid}': {exc}") from exc
        if interval is not None and gpus:
            state.time_slice_gpus = gpus
            self.checkpoint.save()
            try:
                self.settings.smi.set_time_slice(gpus, gpuconfig.INTERVALS[interval])
            except StrategyError as exc:
                raise StrategyError(f"prepare devices failed: error applying config: error setting timeslice config for requests "
                                    f"'{requests}' in claim '{uid}': {exc}") from exc
        if sharing.strategy == gpuconfig.MPS:
            self._start_mps(uid, plans, sharing, state, gpus)

    def _start_mps(self, uid: str, plans: list[_Planned], sharing: gpuconfig.Sharing, state: GroupRecord, gpus: list[str]) -> None:
        failed = "prepare devices failed: error applying config: "
        if self.settings.shares:
            raise StrategyError(failed + "MPS sharing is not supported when consumable shares is enabled")
        if self.settings.dynamic_mig_node:
            raise StrategyError(failed + "MPS is not yet supported when using featureGates.DynamicMIG=true")
        if sharing.mps_with_time_slicing:
            raise StrategyError(failed + f"error getting MPS configuration: cannot use TimeSlicingConfig with the '{gpuconfig.MPS}' strategy")
        mps = self.settings.mps
        if mps is None:
            raise StrategyError(failed + "error starting MPS control daemon: the plugin has no MPS control directory")
        uuids = sorted(p.existing.uuid if p.existing is not None else p.gpu_uuid for p in plans)
        daemon = mps_daemon_id(uid, uuids)
        try:
            limits = gpuconfig.pinned_limits(sharing.mps or {}, uuids)
        except gpuconfig.ConfigError as exc:
            raise StrategyError(failed + f"error starting MPS control daemon: error transforming DefaultPerDevicePinnedMemoryLimit into string: {exc}") from exc
        settings = {f"MPS_PINNED_MEM_LIMIT_{u}": v for u, v in limits.items()}
        for key, name in (("defaultActiveThreadPercentage", "MPS_ACTIVE_THREAD_PERCENTAGE"), ("multiUser", "MPS_MULTI_USER")):
            if (sharing.mps or {}).get(key) is not None:
                settings[name] = str(sharing.mps[key]).lower()
        if MPS_LIMITS_IGNORED in self.settings.faults:  # the fault: the daemon starts with its own defaults
            settings = {k: v for k, v in settings.items() if k == "MPS_MULTI_USER"}
        state.mps_daemon, state.mps_gpus = daemon, gpus
        self.checkpoint.save()
        try:
            self.settings.smi.set_compute_mode(gpus, "EXCLUSIVE_PROCESS")
            mps.start(daemon, uuids, settings)
        except StrategyError as exc:
            raise StrategyError(failed + f"error starting MPS control daemon: {exc}") from exc
        mps.wait_ready(daemon)

    def _undo_groups(self, uid: str, groups: list[GroupRecord]) -> None:
        """What the groups' strategies changed, set back; a GPU another claim still holds keeps its time slice."""
        for group in groups:
            if group.mps_daemon and self.settings.mps is not None:
                try:
                    self.settings.mps.stop(group.mps_daemon, keep_deployment=MPS_DAEMON_LEFT_BEHIND in self.settings.faults)
                    self.settings.smi.set_compute_mode(group.mps_gpus, "DEFAULT")
                except StrategyError as exc:
                    raise StrategyError(f"error stopping MPS control daemon: {exc}") from exc
            reset = [g for g in group.time_slice_gpus if not (self.settings.shares and self._gpu_held(uid, g))]
            if reset:
                try:
                    self.settings.smi.set_time_slice(reset, gpuconfig.INTERVALS[gpuconfig.DEFAULT_INTERVAL])
                except StrategyError as exc:
                    raise StrategyError(f"error setting timeslice for devices: {exc}") from exc

    def _holders(self, uid: str, device: str) -> list[PreparedDevice]:
        """The device as prepared for other claims (more than none only with consumable shares)."""
        return [d for other, rec in self.checkpoint.claims.items() if other != uid and rec.state == PREPARED
                for d in rec.devices if d.device_name == device]

    def _gpu_held(self, uid: str, gpu_uuid: str) -> bool:
        """Whether another prepared claim holds the whole GPU `gpu_uuid`."""
        return any(d.mig is None and d.visible_uuid == gpu_uuid for other, rec in self.checkpoint.claims.items()
                   if other != uid and rec.state == PREPARED for d in rec.devices)

    def _destroy_at(self, mig: MigRecord) -> None:
        try:
            handle = self.nvml.by_uuid(mig.gpu_uuid)
        except pynvml.NVMLError_NotFound:
            return
        for inst in self.nvml.instances(handle) if self.nvml.mig_enabled(handle) else []:
            if (inst.profile_id, inst.start, inst.size) == (mig.profile_id, mig.start, mig.size):
                self.nvml.destroy_instance(inst)

    # --- inventory (health) ---

    def device_names(self) -> list[str]:
        """Every device of this node, as the health service reports them."""
        with self.lock, self.session():
            return [name for minor in self.nvml.minors() for name in self.nvml.device_names(minor, self.settings.mig_mode == MIG_DYNAMIC)]


def _by_device(allocated: list[AllocatedDevice]) -> dict[str, list[str]]:
    """Request names per device, in allocation order (admin access may list a device twice)."""
    grouped: dict[str, list[str]] = {}
    for a in allocated:
        names = grouped.setdefault(a.device, [])
        if a.request not in names:
            names.append(a.request)
    return grouped


def _instance(mig: MigRecord) -> MigDevice:
    return MigDevice(mig.gpu_uuid, mig.gi_id, mig.ci_id, mig.profile_id, Placement(mig.start, mig.size), mig.uuid)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
