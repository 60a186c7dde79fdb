"""The driver's one adapter over NVML (nvidia-ml-py): what the publisher reads and what the kubelet
plugin and the static-MIG tool (`miglayout`) change.

Everything here goes through pynvml, never through the board catalog, so the same code runs against
the real libnvidia-ml.so.1 on a real node. Device names are resolved against NVML too: a MIG profile
token is matched against the names NVML gives its GPU-instance profiles. One process can read many
simulated nodes: the fake library's `fakeNvmlSetStateDir` repoints it between nvmlShutdown and
nvmlInit (`NvmlLibrary`); the plugin instead holds one session on its node (`load_library`, `Nvml.open`).
"""

from __future__ import annotations

import ctypes
import os
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import pynvml

from fake_gpus.driver.dynamic_offer import DynamicOffer, dynamic_offer
from fake_gpus.driver.faults import NVML_PLACES_FAULT, active_faults
from fake_gpus.driver.identity import ARCHITECTURE_NAMES, BRAND_NAMES, DeviceRef, mig_device_name, profile_token
from fake_gpus.driver.pci import DEFAULT_SYSFS, read_place

SONAME = "libnvidia-ml.so.1"
_SKIPPED = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)


class InventoryError(RuntimeError):
    """NVML could not be read; the message names the node and the call."""


class DeviceError(RuntimeError):
    """A device cannot be prepared, created or released; the message is meant for a claim's error string."""


@dataclass(frozen=True)
class Placement:
    """A run of memory slices: `size` slices starting at `start`."""

    start: int
    size: int

    @property
    def slices(self) -> range:
        return range(self.start, self.start + self.size)

    def overlaps(self, other: Placement) -> bool:
        return self.start < other.start + other.size and other.start < self.start + self.size


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile NVML answers for (NOT_SUPPORTED ones are left out, as NVIDIA's driver does)."""

    enum: int  # NVML_GPU_INSTANCE_PROFILE_* value
    id: int  # NVML's profile id (nvidia-smi's ID column)
    name: str  # "1g.10gb" (NVML's "MIG " prefix removed)
    slice_count: int  # compute slices
    instance_count: int
    memory_mib: int
    multiprocessors: int
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    placements: tuple[Placement, ...]

    @property
    def size(self) -> int:
        """Memory slices one instance covers."""
        return self.placements[0].size if self.placements else 0


def memory_slices(profiles: tuple[MigProfile, ...]) -> int:
    """How many memory slices NVML places this GPU's instances over: where its furthest placement ends
    (a board fact the driver reads back through NVML, never from the catalog)."""
    return max((p.start + p.size for profile in profiles for p in profile.placements), default=0)


@dataclass(frozen=True)
class MigDevice:
    """A live MIG device: a compute instance inside a GPU instance of the GPU with `gpu_uuid`."""

    gpu_uuid: str
    gi_id: int
    ci_id: int
    profile_id: int
    placement: Placement
    uuid: str

    @property
    def start(self) -> int:
        return self.placement.start

    @property
    def size(self) -> int:
        return self.placement.size


@dataclass(frozen=True)
class Gpu:
    """One physical GPU."""

    index: int
    minor: int
    uuid: str
    product_name: str
    memory_mib: int
    architecture: str  # NVIDIA's spelling, e.g. "Hopper"
    brand: str  # e.g. "Nvidia"
    cuda_compute_capability: tuple[int, int]
    pci_bus_id: str  # "00000000:18:00.0"
    mig_capable: bool
    mig_enabled: bool
    profiles: tuple[MigProfile, ...]
    mig_devices: tuple[MigDevice, ...]
    pcie_root: str | None = None  # from sysfs, not NVML (see pci.py); None where sysfs does not say
    numa_node: int | None = None
    nvml_architecture: int = 0  # NVML_DEVICE_ARCH_*; 0 where NVML does not say

    @property
    def dynamic_offer(self) -> DynamicOffer:
        """What this GPU publishes in dynamic-MIG mode (fake_gpus.driver.dynamic_offer)."""
        return dynamic_offer(self.mig_capable, self.mig_enabled, self.nvml_architecture)

    @property
    def memory_slices(self) -> int:
        return memory_slices(self.profiles)

    def profile(self, name: str) -> MigProfile | None:
        return next((p for p in self.profiles if p.name == name), None)

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.profiles if p.id == profile_id), None)


@dataclass(frozen=True)
class NodeInventory:
    """Everything the driver publishes for one node."""

    driver_version: str
    cuda_driver_version: int
    gpus: tuple[Gpu, ...]


# --- loading the library ---


class NvmlLibrary:
    """pynvml bound to one libnvidia-ml.so.1; with the fake, sessions on per-node state directories.

    pynvml is process-global, so sessions are serialised by a lock."""

    _lock = threading.RLock()

    def __init__(self, library: Path | None = None) -> None:
        self._lib: ctypes.CDLL | None = None
        if library is not None:
            self._lib = ctypes.CDLL(str(library))
            if pynvml.nvmlLib is None:
                pynvml.nvmlLib = self._lib
            if pynvml.nvmlLib._handle != self._lib._handle:
                raise InventoryError(f"pynvml already uses another NVML library than {library}")
            if hasattr(self._lib, "fakeNvmlSetStateDir"):
                self._lib.fakeNvmlSetStateDir.argtypes = [ctypes.c_char_p]

    @contextmanager
    def session(self, state_dir: Path | None = None) -> Iterator[None]:
        """nvmlInit ... nvmlShutdown, on `state_dir` when the library is the fake."""
        with self._lock:
            if state_dir is not None:
                if self._lib is None or not hasattr(self._lib, "fakeNvmlSetStateDir"):
                    raise InventoryError("a state directory needs the fake NVML library (fakeNvmlSetStateDir)")
                rc = self._lib.fakeNvmlSetStateDir(str(state_dir).encode())
                if rc != pynvml.NVML_SUCCESS:
                    raise InventoryError(f"fakeNvmlSetStateDir({state_dir}) failed with NVML error {rc} (is NVML still initialised?)")
            pynvml.nvmlInit()
            try:
                yield
            finally:
                pynvml.nvmlShutdown()


def load_library(lib_dir: str | os.PathLike[str] | None, state_dir: str | os.PathLike[str] | None) -> None:
    """Load NVML for this process: from `lib_dir` if given (else the loader's search path), on `state_dir` if given.

    Must run before the first nvmlInit; the fake library reads FAKE_NVML_STATE_DIR at init."""
    if state_dir is not None:
        os.environ["FAKE_NVML_STATE_DIR"] = str(Path(state_dir).resolve())
    if lib_dir is not None and pynvml.nvmlLib is None:
        pynvml.nvmlLib = ctypes.CDLL(str(Path(lib_dir).resolve() / SONAME))


def library_dir() -> Path | None:
    """The directory the loaded libnvidia-ml.so.1 came from (what a container needs mounted), if known."""
    name = getattr(pynvml.nvmlLib, "_name", None)
    if name and os.path.isabs(name):
        return Path(name).parent
    try:  # loaded by soname: the dynamic loader knows where it found it
        with open("/proc/self/maps") as maps:
            for line in maps:
                path = line.split()[-1]
                if Path(path).name.startswith("libnvidia-ml.so"):
                    return Path(path).parent
    except OSError:
        pass
    return None


# --- the adapter ---


class Nvml:
    """NVML as the driver uses it, on an initialised library: reads, name resolution and MIG changes.

    Not thread-safe on its own: callers serialise (NVML state changes are not atomic across the GI/CI
    steps anyway). Profiles are cached per GPU UUID for the life of the object."""

    def __init__(self, nvml_places: bool = False) -> None:
        self._profiles: dict[str, tuple[MigProfile, ...]] = {}
        # the fault `nvml-chooses-placement`: new GPU instances go where NVML puts them, not where allocated
        self.nvml_places = nvml_places

    @classmethod
    def open(cls) -> Nvml:
        """nvmlInit, held until close() (the plugin's one long session on its node); the plugin's fault
        switches are its process's (faults.active_faults), so the one that concerns NVML is read here."""
        pynvml.nvmlInit()
        return cls(nvml_places=NVML_PLACES_FAULT in active_faults())

    def close(self) -> None:
        pynvml.nvmlShutdown()

    # --- GPUs ---

    def gpu_count(self) -> int:
        return pynvml.nvmlDeviceGetCount()

    def gpu_by_minor(self, minor: int):
        """The handle of the GPU with this minor number; DeviceError when the node has none."""
        for i in range(self.gpu_count()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(i)
            if pynvml.nvmlDeviceGetMinorNumber(handle) == minor:
                return handle
        raise DeviceError(f"GPU with minor {minor} does not exist on this node")

    def gpu_uuid(self, minor: int) -> str:
        return _text(pynvml.nvmlDeviceGetUUID(self.gpu_by_minor(minor)))

    def minors(self) -> list[int]:
        return [pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(self.gpu_count())]

    def by_uuid(self, uuid: str):
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)

    def mig_mode(self, handle) -> tuple[bool, bool]:
        """(capable, enabled)."""
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError_NotSupported:
            return False, False
        return True, current == pynvml.NVML_DEVICE_MIG_ENABLE

    def mig_enabled(self, handle) -> bool:
        return self.mig_mode(handle)[1]

    def gpu(self, index: int) -> Gpu:
        """One GPU by NVML index."""
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        capable, enabled = self.mig_mode(handle)
        architecture = pynvml.nvmlDeviceGetArchitecture(handle)
        return Gpu(
            index=index,
            minor=pynvml.nvmlDeviceGetMinorNumber(handle),
            uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
            product_name=_text(pynvml.nvmlDeviceGetName(handle)),
            memory_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
            architecture=ARCHITECTURE_NAMES.get(architecture, "Unknown"),
            brand=BRAND_NAMES.get(pynvml.nvmlDeviceGetBrand(handle), "Unknown"),
            cuda_compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
            pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo_v3(handle).busId),
            mig_capable=capable,
            mig_enabled=enabled,
            profiles=self.profiles(handle) if capable else (),
            mig_devices=self.instances(handle) if enabled else (),
            nvml_architecture=architecture,
        )

    def node(self) -> NodeInventory:
        """Every GPU of the node NVML is open on."""
        try:
            return NodeInventory(
                driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
                cuda_driver_version=pynvml.nvmlSystemGetCudaDriverVersion(),
                gpus=tuple(self.gpu(i) for i in range(self.gpu_count())),
            )
        except pynvml.NVMLError as exc:
            raise InventoryError(f"NVML: {exc}") from exc

    # --- MIG profiles ---

    def profiles(self, handle) -> tuple[MigProfile, ...]:
        """GPU-instance profiles by enum 0..COUNT-1, skipping NOT_SUPPORTED / INVALID_ARGUMENT."""
        key = _text(pynvml.nvmlDeviceGetUUID(handle))
        if key not in self._profiles:
            self._profiles[key] = _read_profiles(handle)
        return self._profiles[key]

    def profile_for_token(self, handle, token: str) -> MigProfile:
        """The profile whose NVML name maps to `token` (the profile part of a device name)."""
        for profile in self.profiles(handle):
            if profile_token(profile.name) == token:
                return profile
        offered = ", ".join(p.name for p in self.profiles(handle)) or "none"
        raise DeviceError(f"MIG profile {token!r} is not offered by this GPU (NVML offers: {offered})")

    def device_names(self, minor: int, dynamic: bool) -> list[str]:
        """Names of the devices of GPU `minor`: dynamic, those its dynamic offer holds (the GPU, every possible
        MIG device); static, the GPU, then its live MIG devices."""
        handle = self.gpu_by_minor(minor)
        if dynamic:
            offer = dynamic_offer(*self.mig_mode(handle), pynvml.nvmlDeviceGetArchitecture(handle))
            names = [f"gpu-{minor}"] if offer.full_gpu else []
            for profile in self.profiles(handle) if offer.partitions else ():
                names += [mig_device_name(minor, profile.name, profile.id, p.start) for p in profile.placements]
            return names
        names = [f"gpu-{minor}"]
        if self.mig_enabled(handle):
            by_id = {p.id: p for p in self.profiles(handle)}
            names += [mig_device_name(minor, by_id[m.profile_id].name, m.profile_id, m.start) for m in self.instances(handle) if m.profile_id in by_id]
        return names

    def resolve(self, ref: DeviceRef):
        """(GPU handle, MIG profile or None, placement size or None) named by a device name; DeviceError if
        NVML has no such thing."""
        handle = self.gpu_by_minor(ref.minor)
        if not ref.is_mig:
            return handle, None, None
        profile = self.profile_for_token(handle, ref.profile_token or "")
        if ref.profile_id != profile.id:
            raise DeviceError(f"{profile.name} is MIG profile {profile.id} on this GPU, not {ref.profile_id}")
        sizes = [p.size for p in profile.placements if p.start == ref.start]
        if not sizes:
            raise DeviceError(f"{profile.name} has no placement starting at memory slice {ref.start} on this GPU")
        return handle, profile, sizes[0]

    # --- MIG instances ---

    def instances(self, handle) -> tuple[MigDevice, ...]:
        """Live MIG devices of a GPU with MIG on, in placement order (a GPU instance without a compute
        instance is no device)."""
        gpu_uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
        found = []
        for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
            try:
                mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
            except pynvml.NVMLError_NotFound:
                continue  # an empty slot
            gi_id = pynvml.nvmlDeviceGetGpuInstanceId(mig)
            gi = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_id))
            found.append(MigDevice(gpu_uuid, gi_id, pynvml.nvmlDeviceGetComputeInstanceId(mig), gi.profileId,
                                   Placement(gi.placement.start, gi.placement.size), _text(pynvml.nvmlDeviceGetUUID(mig))))
        return tuple(sorted(found, key=lambda m: (m.start, m.gi_id, m.ci_id)))

    def find_instance(self, handle, profile: MigProfile, start: int, size: int) -> MigDevice | None:
        """The live MIG device of `profile` at this placement, if there is one."""
        if not self.mig_enabled(handle):
            return None
        return next((m for m in self.instances(handle) if (m.profile_id, m.start, m.size) == (profile.id, start, size)), None)

    def enable_mig(self, handle) -> None:
        """MIG mode on, if it is off."""
        if not self.mig_enabled(handle):
            status = pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
            if status != pynvml.NVML_SUCCESS:
                raise DeviceError(f"enabling MIG mode returned activation status {status}")

    def create_instance(self, handle, profile: MigProfile, start: int, size: int) -> MigDevice:
        """MIG mode on (if off), GPU instance at exactly this placement, one compute instance filling it;
        nothing is left half-made on failure. The one way the driver creates MIG devices."""
        self.enable_mig(handle)
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        try:
            if self.nvml_places:  # the fault: any free placement NVML likes, whatever was allocated
                gi = pynvml.nvmlDeviceCreateGpuInstance(handle, profile.id)
            else:
                gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile.id, ctypes.pointer(placement))
        except pynvml.NVMLError as exc:
            raise DeviceError(f"creating GPU instance {profile.name} at slices {start}..{start + size - 1}: {exc}") from exc
        try:
            ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, _full_compute_profile(gi, profile))
        except (pynvml.NVMLError, DeviceError) as exc:
            pynvml.nvmlGpuInstanceDestroy(gi)
            raise DeviceError(f"creating the compute instance of {profile.name}: {exc}") from exc
        gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
        ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
        # where NVML says the instance is (with the fault, not where it was asked for): what the plugin records
        return MigDevice(_text(pynvml.nvmlDeviceGetUUID(handle)), gi_info.id, ci_info.id, gi_info.profileId,
                         Placement(gi_info.placement.start, gi_info.placement.size), _text(pynvml.nvmlDeviceGetUUID(ci_info.device)))

    def destroy_instance(self, inst: MigDevice) -> bool:
        """Destroy a MIG device; False when it is already gone (or replaced by another one).

        MIG mode stays on: other instances may live on the GPU, and turning it off is not our call."""
        try:
            handle = self.by_uuid(inst.gpu_uuid)
            gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, inst.gi_id)
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument, pynvml.NVMLError_NotSupported):
            return False
        info = pynvml.nvmlGpuInstanceGetInfo(gi)
        if (info.profileId, info.placement.start, info.placement.size) != (inst.profile_id, inst.start, inst.size):
            return False  # the id was reused by an instance that is not ours
        try:
            pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, inst.ci_id))
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            pass  # compute instance already gone; the GPU instance still goes
        pynvml.nvmlGpuInstanceDestroy(gi)
        return True

    def destroy_all(self, handle) -> None:
        """Every compute and GPU instance of a GPU, also GPU instances without a compute instance."""
        for mig in self.instances(handle):
            gi = pynvml.nvmlDeviceGetGpuInstanceById(handle, mig.gi_id)
            pynvml.nvmlComputeInstanceDestroy(pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, mig.ci_id))
        for profile in self.profiles(handle):
            buf = (pynvml.c_nvmlGpuInstance_t * max(1, profile.instance_count))()
            count = ctypes.c_uint(0)
            pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, buf, ctypes.byref(count))
            for i in range(count.value):
                pynvml.nvmlGpuInstanceDestroy(buf[i])


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _profile_name(raw: str | bytes) -> str:
    """Real NVML names profiles "MIG 1g.10gb"; device names and claims use the bare "1g.10gb"."""
    return _text(raw).removeprefix("MIG ").strip()


def _placements(handle, profile_id: int) -> tuple[Placement, ...]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, None, ctypes.byref(count))
    if count.value == 0:
        return ()
    buf = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile_id, buf, ctypes.byref(count))
    return tuple(Placement(buf[i].start, buf[i].size) for i in range(count.value))


def _read_profiles(handle) -> tuple[MigProfile, ...]:
    profiles = []
    for enum in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, enum)
            placements = _placements(handle, info.id)
        except pynvml.NVMLError as exc:
            if exc.value in _SKIPPED:
                continue
            raise
        profiles.append(MigProfile(
            enum=enum, id=info.id, name=_profile_name(info.name), slice_count=info.sliceCount,
            instance_count=info.instanceCount, memory_mib=info.memorySizeMB, multiprocessors=info.multiprocessorCount,
            copy_engines=info.copyEngineCount, decoders=info.decoderCount, encoders=info.encoderCount,
            jpeg_engines=info.jpegCount, ofa_engines=info.ofaCount, placements=placements,
        ))
    return tuple(profiles)


def _full_compute_profile(gi, profile: MigProfile) -> int:
    """Id of the compute-instance profile spanning the whole GPU instance (as NVML reports it)."""
    for enum in range(pynvml.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
        try:
            info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, enum, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
        except pynvml.NVMLError:
            continue
        if info.sliceCount == profile.slice_count:
            return info.id
    raise DeviceError(f"no compute-instance profile spans a {profile.slice_count}-slice GPU instance of {profile.name}")


# --- the publisher's read of a node ---


def node_sysfs(state_dir: Path | None) -> Path:
    """The sysfs a node's driver reads: the node's own view in its fake state directory, else /sys."""
    view = Path(state_dir) / "sys" if state_dir is not None else None
    return view if view is not None and view.is_dir() else DEFAULT_SYSFS


def with_pci_places(inv: NodeInventory, sysfs: Path) -> NodeInventory:
    """The inventory with each GPU's PCIe root and NUMA node read from `sysfs`."""
    gpus = []
    for gpu in inv.gpus:
        place = read_place(gpu.pci_bus_id, sysfs)
        gpus.append(replace(gpu, pcie_root=place.pcie_root, numa_node=place.numa_node))
    return replace(inv, gpus=tuple(gpus))


def inventory(nvml: NvmlLibrary, state_dir: Path | None = None, sysfs: Path | None = None) -> NodeInventory:
    """Open a session (on `state_dir` with the fake) and read the node, PCI places from its sysfs."""
    with nvml.session(state_dir):
        inv = Nvml().node()
    return with_pci_places(inv, sysfs or node_sysfs(state_dir))
