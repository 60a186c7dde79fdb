"""The catalog's data model: boards, their MIG profiles, and the constants every board shares."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

from hostenv.errors import BadInputError

__all__ = ["ARCHITECTURES", "COMPUTE_SLICES", "DEFAULT_SOURCE", "GPUS_PER_NODE_MAX", "MEMORY_SLICES", "MIG_MEMORY_SLICES", "NVIDIA_PCI_VENDOR", "PROVENANCE_CLASSES", "UNKNOWN",
           "Board", "CatalogError", "ComputeInstanceProfile", "GpuInstanceProfile", "ci_label", "provenance_class"]

# Most MIG boards split memory into 8 slices (3g takes 4 of them, 7g all 8) and compute into 7; the A30
# splits both into 4 (NVIDIA MIG User Guide, each supported GPU's profile table); the RTX PRO 6000 splits
# compute into 4 and memory into 12 (its real `nvidia-smi mig -lgipp`: 1g {0,3,6,9}:3, 4g {0}:12). A board without MIG
# (T4, L4, L40S) has no memory slices: its file says 0 and lists no profiles. COMPUTE_SLICES is the most
# any board has; a board's own count is its largest profile's (Board.compute_slices).
MEMORY_SLICES = 8
MIG_MEMORY_SLICES = (4, 8, 12)
COMPUTE_SLICES = 7
NVIDIA_PCI_VENDOR = 0x10DE
# The most GPUs of one board a node holds: HGX/DGX baseboards carry 4 or 8 (H100/H200 datasheets, HGX and
# DGX B200), H100 NVL servers 1-8 (its datasheet), a GB200 NVL72 compute tray 4: each board's cited
# gpus_per_node. A board file saying more would let a layout ask for that many fake GPUs.
GPUS_PER_NODE_MAX = 8
ARCHITECTURES = {"turing": 6, "ampere": 7, "ada": 8, "hopper": 9, "blackwell": 10}  # NVML_DEVICE_ARCH_* (nvml.h)
UNKNOWN = "unknown"
DEFAULT_SOURCE = "default"
# Every citation starts with its fact's class: "measured: " (real nvidia-smi/lspci output),
# "published: " (NVIDIA's tables, headers and configs) or "derived: " (a rule from other facts,
# stated in the citation). A fact no source gave is null with the citation "unknown".
PROVENANCE_CLASSES = ("measured", "published", "derived")


def ci_label(name: str, id: int, names: list[str] | tuple[str, ...]) -> str:
    """The key of a compute-instance profile in fact paths: its name, or "name@id" where two CIs of one
    GPU instance share the name (the 16- and 26-SM CIs of a 1g.20gb GI are both "1g.20gb")."""
    return name if list(names).count(name) == 1 else f"{name}@{id}"


def provenance_class(citation: str) -> str:
    """The class a citation starts with ("measured", "published", "derived"), or "unknown"."""
    head = citation.split(":", 1)[0]
    return head if head in PROVENANCE_CLASSES else UNKNOWN


class CatalogError(BadInputError):
    """A board file is missing, malformed or inconsistent."""


@dataclass(frozen=True)
class ComputeInstanceProfile:
    nvml_profile: int  # NVML_COMPUTE_INSTANCE_PROFILE_* value
    id: int  # info.id as NVML reports it
    name: str  # e.g. "1c.3g.40gb"
    slice_count: int
    multiprocessors: int | None  # None: no public source gave it


@dataclass(frozen=True)
class GpuInstanceProfile:
    nvml_profile: int  # NVML_GPU_INSTANCE_PROFILE_* passed to ...GetGpuInstanceProfileInfo
    id: int  # profile id (nvidia-smi "ID", info.id), e.g. 19
    name: str  # "1g.10gb"
    slice_count: int  # compute slices (info.sliceCount)
    memory_slices: int  # placement size over the board's memory slices
    # The counts below are None only where no public source gave them
    # (see the board file's sources); every H100/H200 value is known.
    memory_mib: int | None  # info.memorySizeMB
    multiprocessors: int | None
    copy_engines: int | None
    decoders: int | None
    encoders: int | None
    jpeg_engines: int | None
    ofa_engines: int | None
    max_instances: int  # info.instanceCount
    placements: tuple[int, ...]  # possible placement starts
    compute_instance_profiles: tuple[ComputeInstanceProfile, ...]
    p2p_supported: bool = False  # info.isP2pSupported ("P2P" column of -lgip)
    # Why max_instances is below what the placements could hold (e.g. a single
    # set of media engines); None when they agree.
    instance_limit_reason: str | None = None

    def ci_label(self, ci: ComputeInstanceProfile) -> str:
        """The key of ``ci`` in this board's fact paths (see :func:`ci_label`)."""
        return ci_label(ci.name, ci.id, [c.name for c in self.compute_instance_profiles])

    @property
    def complete(self) -> bool:
        """True when every count of this profile and its CIs is known."""
        counts = (self.memory_mib, self.multiprocessors, self.copy_engines, self.decoders,
                  self.encoders, self.jpeg_engines, self.ofa_engines)
        cis = (c.multiprocessors for c in self.compute_instance_profiles)
        return None not in counts and None not in cis


@dataclass(frozen=True)
class Board:
    key: str
    product_name: str
    memory_mib: int
    pci_device_id: int  # NVML pciDeviceId form: (device << 16) | 0x10DE
    pci_subsystem_id: int | None
    architecture: str  # a key of ARCHITECTURES
    nvml_architecture: int  # NVML_DEVICE_ARCH_*
    brand: str  # lower-case brand name
    nvml_brand: int  # NVML_BRAND_*
    cuda_compute_capability: tuple[int, int]
    driver_version: str  # e.g. "580.95.05"
    cuda_driver_version: int  # nvmlSystemGetCudaDriverVersion form, e.g. 13000
    multiprocessors: int
    copy_engines: int | None
    decoders: int | None
    encoders: int | None
    jpeg_engines: int | None
    ofa_engines: int | None
    memory_slices: int  # 8, 4 (A30), 12 (RTX PRO 6000) or 0 (no MIG)
    gpus_per_node: int  # most GPUs of this board one node holds (HGX baseboard, NVL72 compute tray, PCIe server)
    gpu_instance_profiles: tuple[GpuInstanceProfile, ...]
    sources: Mapping[str, str]  # fact path -> citation
    # Strings NVIDIA's DRA driver publishes for the `brand` and `architecture`
    # attributes (go-nvlib's spelling of the NVML enums, e.g. "Nvidia").
    dra_brand: str = ""
    dra_architecture: str = ""
    # Named MIG layouts (e.g. gpu-operator's "all-balanced"): name -> {profile: count}.
    mig_layouts: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))

    @property
    def mig_capable(self) -> bool:
        """Whether the board has MIG at all (a T4, L4 or L40S has not: NVML answers its MIG calls NOT_SUPPORTED)."""
        return bool(self.gpu_instance_profiles)

    @property
    def compute_slices(self) -> int:
        """Compute slices of the whole GPU: the largest profile's (7, or 4 on an A30); 0 without MIG."""
        return max((p.slice_count for p in self.gpu_instance_profiles), default=0)

    def unknown_facts(self) -> tuple[str, ...]:
        """Fact paths whose value no public source gave."""
        return tuple(path for path, src in self.sources.items() if src.startswith(UNKNOWN))

    def provenance(self, path: str) -> tuple[str, str]:
        """(class, citation without its class prefix) of the fact at ``path``, e.g. "gpu_instance_profiles.3g.90gb.memory_mib"."""
        try:
            citation = self.sources[path]
        except KeyError:
            raise CatalogError(f"board {self.key!r} has no fact {path!r}; valid: a key of Board.sources") from None
        cls = provenance_class(citation)
        return cls, citation[len(cls) + 1:].strip() if cls != UNKNOWN else citation

    def facts_by_class(self) -> Mapping[str, tuple[str, ...]]:
        """Fact paths per class: {"measured": (...), "published": (...), "derived": (...), "unknown": (...)}."""
        out: dict[str, list[str]] = {c: [] for c in (*PROVENANCE_CLASSES, UNKNOWN)}
        for path, citation in self.sources.items():
            out[provenance_class(citation)].append(path)
        return MappingProxyType({c: tuple(paths) for c, paths in out.items()})

    def profile(self, name: str) -> GpuInstanceProfile:
        """The GPU-instance profile called ``name``; CatalogError if absent."""
        for p in self.gpu_instance_profiles:
            if p.name == name:
                return p
        valid = ", ".join(p.name for p in self.gpu_instance_profiles)
        raise CatalogError(f"board {self.key!r} has no MIG profile {name!r}; valid profiles: {valid}")

    def profile_by_id(self, profile_id: int) -> GpuInstanceProfile:
        """The GPU-instance profile with NVML/nvidia-smi id ``profile_id``."""
        for p in self.gpu_instance_profiles:
            if p.id == profile_id:
                return p
        valid = ", ".join(str(p.id) for p in self.gpu_instance_profiles)
        raise CatalogError(f"board {self.key!r} has no MIG profile id {profile_id}; valid ids: {valid}")
