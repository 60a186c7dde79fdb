"""What the kubelet plugin does through NVML (nvidia-ml-py only, so it runs unchanged on a real node).

Device names are resolved against NVML, never against the catalog: a MIG profile token is matched
against the names NVML gives its GPU-instance profiles, and the placement comes from the name.
"""

from __future__ import annotations

import ctypes
import os
from dataclasses import dataclass
from pathlib import Path

import pynvml

from fake_gpus.driver.identity import DeviceRef, mig_device_name, profile_token

SONAME = "libnvidia-ml.so.1"


class DeviceError(RuntimeError):
    """A device cannot be prepared or released; the message is meant for the claim's error string."""


@dataclass(frozen=True)
class MigProfile:
    """A GPU-instance profile as NVML describes it, with the compute-instance profile filling it."""

    index: int  # NVML_GPU_INSTANCE_PROFILE_* index
    id: int  # profile id (nvidia-smi's ID column)
    name: str  # e.g. 1g.10gb
    slice_count: int
    ci_profile_index: int  # NVML_COMPUTE_INSTANCE_PROFILE_* index of the CI covering the whole GI


@dataclass(frozen=True)
class MigInstance:
    """A live MIG device: GPU instance + compute instance on the GPU with `gpu_uuid`."""

    gpu_uuid: str
    gi_id: int
    ci_id: int
    profile_id: int
    start: int
    size: int
    uuid: str


def load_library(lib_dir: str | os.PathLike[str] | None, state_dir: str | os.PathLike[str] | None) -> None:
    """Load NVML for this process: from `lib_dir` if given (else the loader's search path), on `state_dir` if given.

    Must run before the first nvmlInit; the fake library reads FAKE_NVML_STATE_DIR at init."""
    if state_dir is not None:
        os.environ["FAKE_NVML_STATE_DIR"] = str(Path(state_dir).resolve())
    if lib_dir is not None and pynvml.nvmlLib is None:
        pynvml.nvmlLib = ctypes.CDLL(str(Path(lib_dir).resolve() / SONAME))


def library_dir() -> Path | None:
    """The directory the loaded libnvidia-ml.so.1 came from (what a container needs mounted), if known."""
    lib = pynvml.nvmlLib
    name = getattr(lib, "_name", None)
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


def _profile_name(raw: bytes | str) -> str:
    """NVML's profile name without the `MIG ` prefix real boards put in front."""
    name = raw.decode() if isinstance(raw, bytes) else raw
    return name.removeprefix("MIG ").strip()


class Nvml:
    """An initialized NVML session with the lookups and MIG operations of prepare/unprepare.

    Not thread-safe on its own: the plugin serializes every call (NVML state changes are not atomic
    across the GI/CI steps anyway)."""

    def __init__(self) -> None:
        pynvml.nvmlInit()
        self._profiles: dict[str, list[MigProfile]] = {}

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
        return _s(pynvml.nvmlDeviceGetUUID(self.gpu_by_minor(minor)))

    def minors(self) -> list[int]:
        return [pynvml.nvmlDeviceGetMinorNumber(pynvml.nvmlDeviceGetHandleByIndex(i)) for i in range(self.gpu_count())]

    def by_uuid(self, uuid: str):
        return pynvml.nvmlDeviceGetHandleByUUID(uuid)

    def mig_enabled(self, handle) -> bool:
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(handle)
        except pynvml.NVMLError_NotSupported:
            return False
        return current == pynvml.NVML_DEVICE_MIG_ENABLE

    # --- MIG profiles ---

    def profiles(self, handle) -> list[MigProfile]:
        """Every GPU-instance profile NVML offers on this GPU (cached per GPU UUID)."""
        key = _s(pynvml.nvmlDeviceGetUUID(handle))
        if key not in self._profiles:
            self._profiles[key] = self._read_profiles(handle)
        return self._profiles[key]

    def _read_profiles(self, handle) -> list[MigProfile]:
        found = []
        for index in range(pynvml.NVML_GPU_INSTANCE_PROFILE_COUNT):
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(handle, index)
            except (pynvml.NVMLError_NotSupported, pynvml.NVMLError_InvalidArgument):
                continue  # index not offered by this board
            found.append(MigProfile(index, info.id, _profile_name(info.name), info.sliceCount, _ci_profile_index(info.sliceCount)))
        return found

    def profile_for_token(self, handle, token: str) -> MigProfile:
        """The profile whose NVML name maps to `token` (the profile part of a device name)."""
        for profile in self.profiles(handle):
            if profile_token(profile.name) == token:
                return profile
        offered = ", ".join(p.name for p in self.profiles(handle)) or "none"
        raise DeviceError(f"MIG profile {token!r} is not offered by this GPU (NVML offers: {offered})")

    def possible_placements(self, handle, profile: MigProfile) -> list[tuple[int, int]]:
        """(start, size) of every placement NVML allows for `profile`."""
        count = ctypes.c_uint(0)
        buf = (pynvml.c_nvmlGpuInstancePlacement_t * 16)()
        count.value = len(buf)
        pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(handle, profile.id, buf, ctypes.byref(count))
        return [(buf[i].start, buf[i].size) for i in range(count.value)]

    def device_names(self, minor: int, dynamic: bool) -> list[str]:
        """Names of the devices of GPU `minor`: the GPU, then every possible (dynamic) or live (static) MIG device."""
        names = [f"gpu-{minor}"]
        handle = self.gpu_by_minor(minor)
        if dynamic:
            for profile in self.profiles(handle):
                names += [mig_device_name(minor, profile.name, profile.id, s) for s, _ in self.possible_placements(handle, profile)]
        elif self.mig_enabled(handle):
            by_id = {p.id: p for p in self.profiles(handle)}
            names += [mig_device_name(minor, by_id[m.profile_id].name, m.profile_id, m.start) for m in self.instances(handle) if m.profile_id in by_id]
        return names

    # --- MIG instances ---

    def instances(self, handle) -> list[MigInstance]:
        """Every GPU instance with its first compute instance, through NVML."""
        found = []
        gpu_uuid = _s(pynvml.nvmlDeviceGetUUID(handle))
        for profile in self.profiles(handle):
            buf = (pynvml.c_nvmlGpuInstance_t * 8)()
            count = ctypes.c_uint(0)
            try:
                pynvml.nvmlDeviceGetGpuInstances(handle, profile.id, buf, ctypes.byref(count))
            except pynvml.NVMLError_NotSupported:
                continue
            for i in range(count.value):
                gi = buf[i]
                info = pynvml.nvmlGpuInstanceGetInfo(gi)
                ci = self._first_ci(gi, profile)
                if ci is None:
                    continue  # a GPU instance without compute instance is no usable device
                ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
                found.append(MigInstance(gpu_uuid, info.id, ci_info.id, info.profileId, info.placement.start,
                                         info.placement.size, _s(pynvml.nvmlDeviceGetUUID(ci_info.device))))
        return found

    def _first_ci(self, gi, profile: MigProfile):
        buf = (pynvml.c_nvmlComputeInstance_t * 8)()
        count = ctypes.c_uint(0)
        try:
            pynvml.nvmlGpuInstanceGetComputeInstances(gi, profile.ci_profile_index, buf, ctypes.byref(count))
        except pynvml.NVMLError:
            return None
        return buf[0] if count.value else None

    def find_instance(self, handle, profile: MigProfile, start: int, size: int) -> MigInstance | None:
        """The live MIG device of `profile` at this placement, if there is one."""
        if not self.mig_enabled(handle):
            return None
        for inst in self.instances(handle):
            if (inst.profile_id, inst.start, inst.size) == (profile.id, start, size):
                return inst
        return None

    def create_instance(self, handle, profile: MigProfile, start: int, size: int) -> MigInstance:
        """MIG mode on (if off), GPU instance at exactly this placement, one compute instance filling it."""
        if not self.mig_enabled(handle):
            status = pynvml.nvmlDeviceSetMigMode(handle, pynvml.NVML_DEVICE_MIG_ENABLE)
            if status != pynvml.NVML_SUCCESS:
                raise DeviceError(f"enabling MIG mode returned activation status {status}")
        placement = pynvml.c_nvmlGpuInstancePlacement_t()
        placement.start, placement.size = start, size
        try:
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, profile.id, ctypes.pointer(placement))
        except pynvml.NVMLError as exc:
            raise DeviceError(f"creating GPU instance {profile.name} at slices {start}..{start + size - 1}: {exc}") from exc
        try:
            ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, profile.ci_profile_index)
        except pynvml.NVMLError as exc:
            pynvml.nvmlGpuInstanceDestroy(gi)  # no half-made device left behind
            raise DeviceError(f"creating the compute instance of {profile.name}: {exc}") from exc
        gi_info = pynvml.nvmlGpuInstanceGetInfo(gi)
        ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
        return MigInstance(_s(pynvml.nvmlDeviceGetUUID(handle)), gi_info.id, ci_info.id, gi_info.profileId, start, size,
                           _s(pynvml.nvmlDeviceGetUUID(ci_info.device)))

    def destroy_instance(self, inst: MigInstance) -> bool:
        """Destroy a MIG device we created; False when it is already gone (or replaced by another one).

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
            ci = pynvml.nvmlGpuInstanceGetComputeInstanceById(gi, inst.ci_id)
            pynvml.nvmlComputeInstanceDestroy(ci)
        except (pynvml.NVMLError_NotFound, pynvml.NVMLError_InvalidArgument):
            pass  # compute instance already gone; the GPU instance still goes
        pynvml.nvmlGpuInstanceDestroy(gi)
        return True

    # --- device names ---

    def resolve(self, ref: DeviceRef):
        """(GPU handle, MIG profile or None, placement size or None) named by a device name; DeviceError if
        NVML has no such thing."""
        handle = self.gpu_by_minor(ref.minor)
        if not ref.is_mig:
            return handle, None, None
        profile = self.profile_for_token(handle, ref.profile_token or "")
        if ref.profile_id != profile.id:
            raise DeviceError(f"{profile.name} is MIG profile {profile.id} on this GPU, not {ref.profile_id}")
        sizes = [n for s, n in self.possible_placements(handle, profile) if s == ref.start]
        if not sizes:
            raise DeviceError(f"{profile.name} has no placement starting at memory slice {ref.start} on this GPU")
        return handle, profile, sizes[0]


def _ci_profile_index(slice_count: int) -> int:
    """The compute-instance profile covering a whole GPU instance of `slice_count` slices."""
    by_slices = {1: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE, 2: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_2_SLICE,
                 3: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_3_SLICE, 4: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_4_SLICE,
                 6: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_6_SLICE, 7: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_7_SLICE,
                 8: pynvml.NVML_COMPUTE_INSTANCE_PROFILE_8_SLICE}
    return by_slices.get(slice_count, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)


def _s(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
