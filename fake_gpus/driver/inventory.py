"""A node's GPUs as NVML reports them: the driver's only view of the hardware.

Everything here goes through nvidia-ml-py (pynvml), never through the board catalog, so the same code
runs against the real libnvidia-ml.so.1 on a real node. One process can read many simulated nodes: the
fake library's `fakeNvmlSetStateDir` repoints it between nvmlShutdown and nvmlInit (`NvmlLibrary`).
"""

from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Iterator

import pynvml

from fake_gpus.driver.identity import ARCHITECTURE_NAMES, BRAND_NAMES
from fake_gpus.driver.pci import DEFAULT_SYSFS, read_place

_SKIPPED = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT)


class InventoryError(RuntimeError):
    """NVML could not be read; the message names the node and the call."""


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
    id: int  # NVML's profile id (the catalog's, read back)
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
    """A live MIG device (a compute instance inside a GPU instance)."""

    uuid: str
    gi_id: int
    ci_id: int
    profile_id: int
    placement: Placement
    memory_mib: int


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


def read_profiles(handle) -> tuple[MigProfile, ...]:
    """GPU-instance profiles by enum 0..COUNT-1, skipping NOT_SUPPORTED / INVALID_ARGUMENT."""
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


def read_mig_devices(handle) -> tuple[MigDevice, ...]:
    """Live MIG devices of a GPU with MIG on, with their GPU/compute instance ids and placement."""
    found = []
    for index in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, index)
        except pynvml.NVMLError_NotFound:
            continue  # an empty slot
        gi_id = pynvml.nvmlDeviceGetGpuInstanceId(mig)
        gi = pynvml.nvmlGpuInstanceGetInfo(pynvml.nvmlDeviceGetGpuInstanceById(handle, gi_id))
        found.append(MigDevice(
            uuid=_text(pynvml.nvmlDeviceGetUUID(mig)), gi_id=gi_id, ci_id=pynvml.nvmlDeviceGetComputeInstanceId(mig),
            profile_id=gi.profileId, placement=Placement(gi.placement.start, gi.placement.size),
            memory_mib=pynvml.nvmlDeviceGetMemoryInfo(mig).total // 2**20,
        ))
    return tuple(sorted(found, key=lambda m: (m.placement.start, m.gi_id, m.ci_id)))


def _mig_mode(handle) -> tuple[bool, bool]:
    """(capable, enabled)."""
    try:
        current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
    except pynvml.NVMLError_NotSupported:
        return False, False
    return True, current == pynvml.NVML_DEVICE_MIG_ENABLE


def read_gpu(index: int) -> Gpu:
    """One GPU by NVML index (needs an open session)."""
    handle = pynvml.nvmlDeviceGetHandleByIndex(index)
    capable, enabled = _mig_mode(handle)
    return Gpu(
        index=index,
        minor=pynvml.nvmlDeviceGetMinorNumber(handle),
        uuid=_text(pynvml.nvmlDeviceGetUUID(handle)),
        product_name=_text(pynvml.nvmlDeviceGetName(handle)),
        memory_mib=pynvml.nvmlDeviceGetMemoryInfo(handle).total // 2**20,
        architecture=ARCHITECTURE_NAMES.get(pynvml.nvmlDeviceGetArchitecture(handle), "Unknown"),
        brand=BRAND_NAMES.get(pynvml.nvmlDeviceGetBrand(handle), "Unknown"),
        cuda_compute_capability=tuple(pynvml.nvmlDeviceGetCudaComputeCapability(handle)),
        pci_bus_id=_text(pynvml.nvmlDeviceGetPciInfo_v3(handle).busId),
        mig_capable=capable,
        mig_enabled=enabled,
        profiles=read_profiles(handle) if capable else (),
        mig_devices=read_mig_devices(handle) if enabled else (),
    )


def read_node() -> NodeInventory:
    """Every GPU of the node NVML is open on (needs an open session)."""
    try:
        return NodeInventory(
            driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
            cuda_driver_version=pynvml.nvmlSystemGetCudaDriverVersion(),
            gpus=tuple(read_gpu(i) for i in range(pynvml.nvmlDeviceGetCount())),
        )
    except pynvml.NVMLError as exc:
        raise InventoryError(f"NVML: {exc}") from exc


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
        inv = read_node()
    return with_pci_places(inv, sysfs or node_sysfs(state_dir))
