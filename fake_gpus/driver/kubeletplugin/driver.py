"""Prepare and unprepare claims: NVML changes, CDI specs and the checkpoint, independent of gRPC versions.

Every call is serialized under one lock: NVML's GPU- and compute-instance steps are not atomic, and
the checkpoint must describe exactly what exists whenever the process dies.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import pynvml

from fake_gpus.driver.identity import parse_device_name
from fake_gpus.driver.kubeletplugin import MIG_DYNAMIC, MIG_STATIC, cdi
from fake_gpus.driver.kubeletplugin.checkpoint import PREPARED, PREPARING, Checkpoint, ClaimRecord, MigRecord, PreparedDevice
from fake_gpus.driver.kubeletplugin.claims import AllocatedDevice, ClaimError, allocated_devices
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


@dataclass
class _Planned:
    """A device resolved against NVML, before any change."""

    device: str
    request_names: list[str]
    gpu_uuid: str
    mig: MigRecord | None = None
    existing: MigDevice | None = None
    adopt: bool = False  # an instance a crashed earlier attempt of this claim created


class Driver:
    """The plugin's state machine over NVML, the CDI directory and the checkpoint."""

    def __init__(self, settings: DriverSettings, nvml: Nvml, checkpoint: Checkpoint,
                 read_claim: Callable[[str, str], dict]) -> None:
        self.settings = settings
        self.nvml = nvml
        self.checkpoint = checkpoint
        self.read_claim = read_claim
        self.lock = threading.Lock()

    # --- prepare ---

    def prepare(self, claims: list[ClaimRef]) -> dict[str, PrepareResult]:
        return {ref.uid: self._prepare_guarded(ref) for ref in claims}

    def _prepare_guarded(self, ref: ClaimRef) -> PrepareResult:
        if "prepare-fails" in self.settings.faults:
            return PrepareResult(error=f"claim {ref.namespace}/{ref.name}: injected fault prepare-fails")
        try:
            with self.lock:
                return PrepareResult(devices=self._prepare(ref))
        except (ClaimError, DeviceError, ValueError, pynvml.NVMLError) as exc:
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
        record = ClaimRecord(ref.namespace, ref.name, PREPARING, planned=[p.mig for p in plans if p.mig and (p.existing is None or p.adopt)])
        self.checkpoint.claims[ref.uid] = record
        self.checkpoint.save()  # before creating anything: a crash from here on leaks nothing
        created: list[MigDevice] = []
        try:
            devices = [self._realize(ref.uid, plan, created) for plan in plans]
        except BaseException:
            # undo this attempt, including instances adopted from a crashed earlier one: nothing stays unowned
            for inst in created + [p.existing for p in plans if p.adopt and p.existing is not None]:
                self.nvml.destroy_instance(inst)
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
        if existing is not None and not adopt:
            owner = self._owner(gpu_uuid, device, uid)
            if owner:
                raise DeviceError(f"device {device} is still prepared for claim {owner}")
        if existing is None and self.settings.mig_mode == MIG_STATIC:
            raise DeviceError(f"MIG device {device} does not exist on this node")
        return _Planned(device, requests, gpu_uuid, mig, existing, adopt)

    def _owner(self, gpu_uuid: str, device: str, uid: str) -> str | None:
        """The other claim this device is prepared for, if any."""
        for other_uid, rec in self.checkpoint.claims.items():
            if other_uid != uid and any(d.device_name == device for d in rec.devices):
                return f"{rec.namespace}/{rec.name} ({other_uid})"
        return None

    def _realize(self, uid: str, plan: _Planned, created: list[MigDevice]) -> PreparedDevice:
        """Create what the plan lacks in NVML and describe the prepared device."""
        cdi_ids = [cdi.cdi_device_id(self.settings.driver, uid, plan.device)]
        device = PreparedDevice(plan.request_names, self.settings.pool_name, plan.device, cdi_ids, visible_uuid=plan.gpu_uuid)
        if plan.mig is None:
            return device
        inst = plan.existing
        if inst is None:
            ref = parse_device_name(plan.device)
            handle, profile, _size = self.nvml.resolve(ref)
            inst = self.nvml.create_instance(handle, profile, plan.mig.start, plan.mig.size)
            created.append(inst)
        device.mig = MigRecord(inst.gpu_uuid, inst.profile_id, inst.start, inst.size, inst.gi_id, inst.ci_id, inst.uuid)
        device.created = plan.existing is None or plan.adopt
        device.visible_uuid = inst.uuid
        return device

    def _write_cdi(self, uid: str, record: ClaimRecord) -> None:
        entries = [(d.device_name, self._visible(d, record.devices), self._nodes(d, record.devices)) for d in record.devices]
        spec = cdi.build_spec(self.settings.driver, uid, entries, self.settings.mounts, self.settings.driver_root)
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
            with self.lock:
                self._unprepare(ref.uid)
            return ""
        except (DeviceError, pynvml.NVMLError, OSError) as exc:
            return f"claim {ref.namespace}/{ref.name}: {exc}"
        except Exception as exc:  # noqa: BLE001
            return f"claim {ref.namespace}/{ref.name}: internal error: {type(exc).__name__}: {exc}"

    def _unprepare(self, uid: str) -> None:
        record = self.checkpoint.claims.get(uid)
        if record is None:
            return
        if "unprepare-leaks" not in self.settings.faults:
            for device in record.devices:
                if device.created and device.mig is not None:
                    self.nvml.destroy_instance(_instance(device.mig))
            for mig in record.planned:  # a prepare that died half-way: whatever it made at its placements
                self._destroy_at(mig)
        cdi.remove_spec(self.settings.cdi_dir, record.cdi_spec or cdi.spec_file_name(self.settings.driver, uid))
        del self.checkpoint.claims[uid]
        self.checkpoint.save()

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
        with self.lock:
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
