"""Hardware catalog: the one source of truth for boards and their MIG facts.

Each board lives in ``boards/<key>.yaml``.  Every fact in a file carries a
citation in a ``sources`` mapping beside it; a fact nobody could find is
``null`` with the source ``unknown``.  The loader validates the whole file on
load and raises :class:`CatalogError` with a one-line message naming the file,
the key and what would have been valid.

File layout (one mapping per board)::

    key, product_name, memory_mib, ...      board facts
    sources: {field: citation, ...}          one citation per board fact
    gpu_instance_profiles:
      - name, nvml_profile, id, ...          one entry per GI profile
        sources: {field: citation, ...}      ``default`` covers every field not
                                             named (one table row = one source)
        compute_instance_profiles:
          - name, nvml_profile, id, slice_count, multiprocessors
            sources: {...}                   same rule as above
    mig_layouts:                             optional named layouts
      layouts: {name: {profile: count}}
      sources: {default | name: citation}

Counts a public source did not give (some Blackwell rows) are ``None`` in the
dataclasses: callers that need every number should check
``GpuInstanceProfile.complete`` or ``Board.unknown_facts()``.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

__all__ = [
    "BOARD_KEYS",
    "BOARDS_DIR",
    "Board",
    "CatalogError",
    "ComputeInstanceProfile",
    "GpuInstanceProfile",
    "all_boards",
    "get_board",
    "load_board_file",
    "load_catalog",
    "layout_fits",
    "max_disjoint_placements",
]

BOARD_KEYS: tuple[str, ...] = (
    "h100-80gb",
    "h100-nvl-94gb",
    "h200-141gb",
    "b200-180gb",
    "gb200-186gb",
)
BOARDS_DIR = Path(__file__).parent / "boards"

# Real MIG boards split memory into 8 slices (3g takes 4 of them, 7g all 8).
MEMORY_SLICES = 8
# ...and compute into 7 slices.
COMPUTE_SLICES = 7
NVIDIA_PCI_VENDOR = 0x10DE
ARCHITECTURES = {"hopper": 9, "blackwell": 10}  # NVML_DEVICE_ARCH_* (nvml.h)
UNKNOWN = "unknown"
DEFAULT_SOURCE = "default"


class CatalogError(ValueError):
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
    architecture: str  # "hopper" | "blackwell"
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
    memory_slices: int  # 8
    gpu_instance_profiles: tuple[GpuInstanceProfile, ...]
    sources: Mapping[str, str]  # fact path -> citation
    # Strings NVIDIA's DRA driver publishes for the `brand` and `architecture`
    # attributes (go-nvlib's spelling of the NVML enums, e.g. "Nvidia").
    dra_brand: str = ""
    dra_architecture: str = ""
    # Named MIG layouts (e.g. gpu-operator's "all-balanced"): name -> {profile: count}.
    mig_layouts: Mapping[str, Mapping[str, int]] = field(default_factory=lambda: MappingProxyType({}))

    def unknown_facts(self) -> tuple[str, ...]:
        """Fact paths whose value no public source gave."""
        return tuple(path for path, src in self.sources.items() if src.startswith(UNKNOWN))

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


# --------------------------------------------------------------------------- #
# Field specifications: name -> (accepted types, nullable)
# --------------------------------------------------------------------------- #

_BOARD_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "product_name": ((str,), False),
    "memory_mib": ((int,), False),
    "pci_device_id": ((int,), False),
    "pci_subsystem_id": ((int,), True),
    "architecture": ((str,), False),
    "nvml_architecture": ((int,), False),
    "brand": ((str,), False),
    "nvml_brand": ((int,), False),
    "dra_brand": ((str,), False),
    "dra_architecture": ((str,), False),
    "cuda_compute_capability": ((list,), False),
    "driver_version": ((str,), False),
    "cuda_driver_version": ((int,), False),
    "multiprocessors": ((int,), False),
    "copy_engines": ((int,), True),
    "decoders": ((int,), True),
    "encoders": ((int,), True),
    "jpeg_engines": ((int,), True),
    "ofa_engines": ((int,), True),
    "memory_slices": ((int,), False),
}

_GI_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "nvml_profile": ((int,), False),
    "id": ((int,), False),
    "slice_count": ((int,), False),
    "memory_slices": ((int,), False),
    "memory_mib": ((int,), True),
    "multiprocessors": ((int,), True),
    "copy_engines": ((int,), True),
    "decoders": ((int,), True),
    "encoders": ((int,), True),
    "jpeg_engines": ((int,), True),
    "ofa_engines": ((int,), True),
    "max_instances": ((int,), False),
    "placements": ((list,), False),
    "p2p_supported": ((bool,), False),
}
_GI_OPTIONAL: dict[str, tuple[tuple[type, ...], bool]] = {
    "instance_limit_reason": ((str,), True),
}

_CI_FIELDS: dict[str, tuple[tuple[type, ...], bool]] = {
    "nvml_profile": ((int,), False),
    "id": ((int,), False),
    "slice_count": ((int,), False),
    "multiprocessors": ((int,), True),
}

_GI_NAME = re.compile(r"^(?P<g>[1-8])g\.(?P<gb>\d+)gb(?P<suffix>[+-][a-z.,]+)?$")
_CI_NAME = re.compile(r"^(?P<c>[1-8])c\.(?P<g>[1-8])g\.(?P<gb>\d+)gb(?P<suffix>[+-][a-z.,]+)?$")
_DRIVER_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
_ALLOWED_TOP = {"key", "sources", "gpu_instance_profiles", "mig_layouts", *(_BOARD_FIELDS)}


class _Ctx:
    """Error context: which file and which key path is being checked."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, key: str, problem: str, valid: str) -> CatalogError:
        return CatalogError(f"{self.file.name}: {key}: {problem}; valid: {valid}")


def _type_names(types: tuple[type, ...]) -> str:
    names = {int: "integer", str: "string", list: "list", bool: "boolean", dict: "mapping"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def _check_type(ctx: _Ctx, key: str, value: Any, types: tuple[type, ...], nullable: bool) -> None:
    if value is None:
        if not nullable:
            raise ctx.fail(key, "is null but this fact is required", _type_names(types))
        return
    # bool is an int subclass in Python; a yes/no in a count field is a typo.
    if isinstance(value, bool) and bool not in types:
        raise ctx.fail(key, f"is a boolean ({value})", _type_names(types))
    if not isinstance(value, types):
        raise ctx.fail(key, f"has type {type(value).__name__} ({value!r})", _type_names(types))
    if isinstance(value, int) and not isinstance(value, bool) and value < 0:
        raise ctx.fail(key, f"is negative ({value})", "a non-negative integer")


def _sources_of(ctx: _Ctx, key: str, raw: Mapping[str, Any]) -> dict[str, str]:
    sources = raw.get("sources")
    if not isinstance(sources, dict) or not sources:
        raise ctx.fail(f"{key}.sources", "is missing or empty", "a mapping of fact name -> citation")
    for name, citation in sources.items():
        if not isinstance(citation, str) or not citation.strip():
            raise ctx.fail(f"{key}.sources.{name}", f"is {citation!r}", "a non-empty citation string")
    return sources


def _collect_facts(
    ctx: _Ctx,
    key: str,
    raw: Mapping[str, Any],
    fields: Mapping[str, tuple[tuple[type, ...], bool]],
    path: str,
    out_sources: dict[str, str],
    optional: Mapping[str, tuple[tuple[type, ...], bool]] | None = None,
) -> None:
    """Type-check ``fields`` of ``raw`` and record each fact's citation."""
    sources = _sources_of(ctx, key, raw)
    allowed = {*fields, *(optional or {}), DEFAULT_SOURCE}
    for name in sources:
        if name not in allowed:
            raise ctx.fail(f"{key}.sources.{name}", "names no fact of this entry", ", ".join(sorted(allowed)))
    checks = {**fields, **{k: v for k, v in (optional or {}).items() if k in raw}}
    for name, (types, nullable) in checks.items():
        if name not in raw:
            raise ctx.fail(f"{key}.{name}", "is missing", _type_names(types))
        value = raw[name]
        _check_type(ctx, f"{key}.{name}", value, types, nullable)
        citation = sources.get(name, sources.get(DEFAULT_SOURCE))
        if citation is None:
            raise ctx.fail(f"{key}.sources.{name}", "has no citation", f"a citation under sources.{name} or sources.{DEFAULT_SOURCE}")
        # An unknown fact must say so, and a fact said to be unknown must be null.
        if value is None and not citation.startswith(UNKNOWN):
            raise ctx.fail(f"{key}.{name}", f"is null but its source is {citation!r}", f"a value, or null with source '{UNKNOWN}'")
        if value is not None and citation.startswith(UNKNOWN):
            raise ctx.fail(f"{key}.{name}", f"has value {value!r} but its source is {citation!r}", "null for an unknown fact, or a real citation")
        out_sources[f"{path}.{name}" if path else name] = citation


def max_disjoint_placements(placements: tuple[int, ...] | list[int], size: int) -> int:
    """Most instances of one profile that fit side by side (greedy by end)."""
    count, free_from = 0, -1
    for start in sorted(placements):
        if start >= free_from:
            count, free_from = count + 1, start + size
    return count


def _check_placements(ctx: _Ctx, key: str, gi: Mapping[str, Any], board_slices: int) -> tuple[int, ...]:
    size, starts = gi["memory_slices"], gi["placements"]
    if not 1 <= size <= board_slices:
        raise ctx.fail(f"{key}.memory_slices", f"is {size}", f"1..{board_slices}")
    if not starts:
        raise ctx.fail(f"{key}.placements", "is empty", "at least one placement start")
    for start in starts:
        if isinstance(start, bool) or not isinstance(start, int) or start < 0:
            raise ctx.fail(f"{key}.placements", f"has start {start!r}", "non-negative integers")
        if start + size > board_slices:
            raise ctx.fail(f"{key}.placements", f"start {start} + size {size} > {board_slices} memory slices", f"starts 0..{board_slices - size}")
        # Real tables place an n-slice instance only on an n-aligned start.
        if start % size:
            raise ctx.fail(f"{key}.placements", f"start {start} is not a multiple of size {size}", f"starts aligned to {size}")
    if list(starts) != sorted(set(starts)):
        raise ctx.fail(f"{key}.placements", f"{starts} is not strictly ascending", "ascending, no duplicates")
    fit = max_disjoint_placements(starts, size)
    limit, reason = gi["max_instances"], gi.get("instance_limit_reason")
    if limit < 1 or limit > fit:
        raise ctx.fail(f"{key}.max_instances", f"is {limit} but the placements hold at most {fit}", f"1..{fit}")
    if limit < fit and not reason:
        raise ctx.fail(f"{key}.max_instances", f"is {limit}, below the {fit} the placements hold, with no instance_limit_reason", f"{fit}, or give instance_limit_reason")
    if limit == fit and reason:
        raise ctx.fail(f"{key}.instance_limit_reason", f"is set but max_instances equals the {fit} placements", "omit it")
    return tuple(starts)


def _parse_ci(ctx: _Ctx, key: str, raw: Any, gi_name: str, gi: Mapping[str, Any], path: str, sources: dict[str, str]) -> ComputeInstanceProfile:
    if not isinstance(raw, dict):
        raise ctx.fail(key, f"is {type(raw).__name__}", "a mapping")
    name = raw.get("name")
    if not isinstance(name, str):
        raise ctx.fail(f"{key}.name", f"is {name!r}", "a profile name such as '1c.3g.40gb'")
    key = f"{key}[{name}]"
    path = f"{path}.{name}"
    _collect_facts(ctx, key, raw, {**_CI_FIELDS, "name": ((str,), False)}, path, sources)
    extra = set(raw) - {*_CI_FIELDS, "name", "sources"}
    if extra:
        raise ctx.fail(key, f"has unknown keys {sorted(extra)}", ", ".join(sorted({*_CI_FIELDS, 'name', 'sources'})))
    slices = raw["slice_count"]
    if not 1 <= slices <= gi["slice_count"]:
        raise ctx.fail(f"{key}.slice_count", f"is {slices}", f"1..{gi['slice_count']} (the GPU instance's slices)")
    # The CI that spans the whole GI is named like the GI; smaller ones get "<c>c." in front.
    expected = gi_name if slices == gi["slice_count"] else f"{slices}c.{gi_name}"
    if name != expected:
        raise ctx.fail(f"{key}.name", f"is {name!r} for {slices} of {gi['slice_count']} slices", repr(expected))
    sms, gi_sms = raw["multiprocessors"], gi["multiprocessors"]
    if sms is not None and gi_sms is not None and sms > gi_sms:
        raise ctx.fail(f"{key}.multiprocessors", f"is {sms}", f"<= {gi_sms} (the GPU instance's)")
    # The CI spanning the whole GI has exactly the GI's SMs.
    if slices == gi["slice_count"] and sms != gi_sms:
        raise ctx.fail(f"{key}.multiprocessors", f"is {sms} for the CI spanning the whole GI", f"the GI's {gi_sms}")
    return ComputeInstanceProfile(
        nvml_profile=raw["nvml_profile"], id=raw["id"], name=name, slice_count=slices, multiprocessors=raw["multiprocessors"]
    )


def _parse_gi(ctx: _Ctx, index: int, raw: Any, board: Mapping[str, Any], sources: dict[str, str]) -> GpuInstanceProfile:
    key = f"gpu_instance_profiles[{index}]"
    if not isinstance(raw, dict):
        raise ctx.fail(key, f"is {type(raw).__name__}", "a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not (m := _GI_NAME.match(name)):
        raise ctx.fail(f"{key}.name", f"is {name!r}", "a MIG profile name such as '1g.10gb' or '1g.10gb+me'")
    key = f"gpu_instance_profiles[{name}]"
    path = f"gpu_instance_profiles.{name}"
    allowed = {*_GI_FIELDS, *_GI_OPTIONAL, "name", "sources", "compute_instance_profiles"}
    extra = set(raw) - allowed
    if extra:
        raise ctx.fail(key, f"has unknown keys {sorted(extra)}", ", ".join(sorted(allowed)))
    _collect_facts(ctx, key, raw, {**_GI_FIELDS, "name": ((str,), False)}, path, sources, _GI_OPTIONAL)
    if raw["slice_count"] != int(m["g"]) or raw["slice_count"] > COMPUTE_SLICES:
        raise ctx.fail(f"{key}.slice_count", f"is {raw['slice_count']} for a '{m['g']}g' profile", m["g"])
    placements = _check_placements(ctx, key, raw, board["memory_slices"])
    mem, share = raw["memory_mib"], board["memory_mib"] * raw["memory_slices"] // board["memory_slices"]
    # A profile gets at most its memory slices' share of the board (real tables stay just below it).
    if mem is not None and not 0 < mem <= share:
        raise ctx.fail(f"{key}.memory_mib", f"is {mem}", f"1..{share} ({raw['memory_slices']}/{board['memory_slices']} of {board['memory_mib']} MiB)")
    sms = raw["multiprocessors"]
    if sms is not None and not 0 < sms <= board["multiprocessors"]:
        raise ctx.fail(f"{key}.multiprocessors", f"is {sms}", f"1..{board['multiprocessors']} (the board's SMs)")
    cis_raw = raw.get("compute_instance_profiles")
    if not isinstance(cis_raw, list) or not cis_raw:
        raise ctx.fail(f"{key}.compute_instance_profiles", "is missing or empty", "a list with at least the CI spanning the whole GI")
    cis = tuple(
        _parse_ci(ctx, f"{key}.compute_instance_profiles", ci, name, raw, f"{path}.compute_instance_profiles", sources)
        for ci in cis_raw
    )
    _unique(ctx, f"{key}.compute_instance_profiles", "name", [c.name for c in cis])
    _unique(ctx, f"{key}.compute_instance_profiles", "id", [c.id for c in cis])
    if not any(c.slice_count == raw["slice_count"] for c in cis):
        raise ctx.fail(f"{key}.compute_instance_profiles", "has no CI spanning the whole GI", f"one named {name!r}")
    return GpuInstanceProfile(
        nvml_profile=raw["nvml_profile"],
        id=raw["id"],
        name=name,
        slice_count=raw["slice_count"],
        memory_slices=raw["memory_slices"],
        memory_mib=raw["memory_mib"],
        multiprocessors=raw["multiprocessors"],
        copy_engines=raw["copy_engines"],
        decoders=raw["decoders"],
        encoders=raw["encoders"],
        jpeg_engines=raw["jpeg_engines"],
        ofa_engines=raw["ofa_engines"],
        max_instances=raw["max_instances"],
        placements=placements,
        compute_instance_profiles=cis,
        p2p_supported=raw["p2p_supported"],
        instance_limit_reason=raw.get("instance_limit_reason"),
    )


def _unique(ctx: _Ctx, key: str, what: str, values: list[Any]) -> None:
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ctx.fail(key, f"repeats {what} {v!r}", f"each {what} once")
        seen.add(v)


def _check_board_facts(ctx: _Ctx, raw: Mapping[str, Any]) -> None:
    if raw["memory_slices"] != MEMORY_SLICES:
        raise ctx.fail("memory_slices", f"is {raw['memory_slices']}", str(MEMORY_SLICES))
    arch = raw["architecture"]
    if ARCHITECTURES.get(arch) != raw["nvml_architecture"]:
        valid = ", ".join(f"{a}={n}" for a, n in ARCHITECTURES.items())
        raise ctx.fail("architecture", f"{arch!r} with nvml_architecture {raw['nvml_architecture']}", valid)
    if raw["brand"] != raw["brand"].lower():
        raise ctx.fail("brand", f"is {raw['brand']!r}", "lower case")
    if raw["pci_device_id"] & 0xFFFF != NVIDIA_PCI_VENDOR:
        raise ctx.fail("pci_device_id", f"is {raw['pci_device_id']:#x}", "(device << 16) | 0x10DE")
    sub = raw["pci_subsystem_id"]
    if sub is not None and sub & 0xFFFF != NVIDIA_PCI_VENDOR:
        raise ctx.fail("pci_subsystem_id", f"is {sub:#x}", "(subsystem << 16) | 0x10DE, or null")
    cc = raw["cuda_compute_capability"]
    if len(cc) != 2 or not all(isinstance(x, int) and not isinstance(x, bool) for x in cc):
        raise ctx.fail("cuda_compute_capability", f"is {cc!r}", "[major, minor] integers")
    if not _DRIVER_VERSION.match(raw["driver_version"]):
        raise ctx.fail("driver_version", f"is {raw['driver_version']!r}", "digits like '580.95.05'")
    cuda = raw["cuda_driver_version"]
    if cuda < 1000 or cuda % 10:
        raise ctx.fail("cuda_driver_version", f"is {cuda}", "major*1000 + minor*10, e.g. 13000")


def layout_fits(profiles: tuple[GpuInstanceProfile, ...], counts: Mapping[str, int]) -> bool:
    """Can ``counts`` instances of the named profiles coexist on one GPU?

    They must take disjoint memory slices at real placements, stay within each
    profile's instance limit and within the 7 compute slices.
    """
    by_name = {p.name: p for p in profiles}
    unknown = sorted(set(counts) - set(by_name))
    if unknown:
        raise CatalogError(f"unknown MIG profiles {unknown}; valid profiles: {', '.join(by_name)}")
    wanted = [by_name[n] for n, c in counts.items() for _ in range(c)]
    if any(counts[p.name] > p.max_instances for p in wanted):
        return False
    if sum(p.slice_count for p in wanted) > COMPUTE_SLICES:
        return False
    # Biggest first keeps the search tiny: at most 7 instances over 8 slices.
    wanted.sort(key=lambda p: -p.memory_slices)
    return _place(wanted, 0)


def _place(wanted: list[GpuInstanceProfile], used: int) -> bool:
    if not wanted:
        return True
    head, rest = wanted[0], wanted[1:]
    for start in head.placements:
        mask = ((1 << head.memory_slices) - 1) << start
        if not used & mask and _place(rest, used | mask):
            return True
    return False


def _parse_layouts(ctx: _Ctx, raw: Any, gis: tuple[GpuInstanceProfile, ...], sources: dict[str, str]) -> Mapping[str, Mapping[str, int]]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, dict) or not isinstance(raw.get("layouts"), dict):
        raise ctx.fail("mig_layouts", f"is {raw!r:.40}", "a mapping with 'layouts: {name: {profile: count}}' and 'sources'")
    srcs = _sources_of(ctx, "mig_layouts", raw)
    names = {g.name for g in gis}
    out: dict[str, Mapping[str, int]] = {}
    for name, counts in raw["layouts"].items():
        key = f"mig_layouts.{name}"
        if not isinstance(counts, dict) or not counts:
            raise ctx.fail(key, f"is {counts!r:.40}", "a mapping of profile name -> instance count")
        for prof, n in counts.items():
            if prof not in names:
                raise ctx.fail(key, f"names unknown profile {prof!r}", ", ".join(sorted(names)))
            if isinstance(n, bool) or not isinstance(n, int) or n < 1:
                raise ctx.fail(f"{key}.{prof}", f"is {n!r}", "a positive integer")
        if not layout_fits(gis, counts):
            raise ctx.fail(key, f"{counts} cannot be placed on one GPU", "counts whose placements fit disjointly in 8 memory slices and 7 compute slices")
        citation = srcs.get(name, srcs.get(DEFAULT_SOURCE))
        if not citation:
            raise ctx.fail(f"mig_layouts.sources.{name}", "has no citation", f"a citation under sources.{name} or sources.{DEFAULT_SOURCE}")
        sources[key] = citation
        out[name] = MappingProxyType(dict(counts))
    return MappingProxyType(out)


def load_board_file(file: Path) -> Board:
    """Parse and validate one board file."""
    file = Path(file)
    ctx = _Ctx(file)
    try:
        # libyaml's loader (same results, ~10x faster): every CLI command, the publisher and the plugin load the catalog
        raw = yaml.load(file.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise CatalogError(f"{file.name}: (file): cannot be read ({exc.strerror}); valid: a readable YAML file") from exc
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise CatalogError(f"{file.name}: (file): is not valid YAML{line}; valid: a YAML mapping") from exc
    if not isinstance(raw, dict):
        raise ctx.fail("(top level)", f"is {type(raw).__name__}", "a mapping")
    key = raw.get("key")
    if key != file.stem:
        raise ctx.fail("key", f"is {key!r} but the file is named {file.name!r}", repr(file.stem))
    extra = set(raw) - _ALLOWED_TOP
    if extra:
        raise ctx.fail("(top level)", f"has unknown keys {sorted(extra)}", ", ".join(sorted(_ALLOWED_TOP)))
    sources: dict[str, str] = {}
    _collect_facts(ctx, "(board)", raw, _BOARD_FIELDS, "", sources)
    _check_board_facts(ctx, raw)
    gis_raw = raw.get("gpu_instance_profiles")
    if not isinstance(gis_raw, list) or not gis_raw:
        raise ctx.fail("gpu_instance_profiles", "is missing or empty", "a list of MIG GPU-instance profiles")
    gis = tuple(_parse_gi(ctx, i, gi, raw, sources) for i, gi in enumerate(gis_raw))
    _unique(ctx, "gpu_instance_profiles", "name", [g.name for g in gis])
    _unique(ctx, "gpu_instance_profiles", "id", [g.id for g in gis])
    _unique(ctx, "gpu_instance_profiles", "nvml_profile", [g.nvml_profile for g in gis])
    layouts = _parse_layouts(ctx, raw.get("mig_layouts"), gis, sources)
    cc = raw["cuda_compute_capability"]
    return Board(
        key=key,
        product_name=raw["product_name"],
        memory_mib=raw["memory_mib"],
        pci_device_id=raw["pci_device_id"],
        pci_subsystem_id=raw["pci_subsystem_id"],
        architecture=raw["architecture"],
        nvml_architecture=raw["nvml_architecture"],
        brand=raw["brand"],
        nvml_brand=raw["nvml_brand"],
        cuda_compute_capability=(cc[0], cc[1]),
        driver_version=raw["driver_version"],
        cuda_driver_version=raw["cuda_driver_version"],
        multiprocessors=raw["multiprocessors"],
        copy_engines=raw["copy_engines"],
        decoders=raw["decoders"],
        encoders=raw["encoders"],
        jpeg_engines=raw["jpeg_engines"],
        ofa_engines=raw["ofa_engines"],
        memory_slices=raw["memory_slices"],
        gpu_instance_profiles=gis,
        sources=MappingProxyType(sources),
        dra_brand=raw["dra_brand"],
        dra_architecture=raw["dra_architecture"],
        mig_layouts=layouts,
    )


def load_catalog(path: Path | str | None = None) -> Mapping[str, Board]:
    """Load every ``*.yaml`` board in ``path`` (default: the packaged boards).

    The packaged catalog is cached and must hold exactly :data:`BOARD_KEYS`.
    """
    if path is None:
        return _default_catalog()
    return _load_dir(Path(path))


def _load_dir(directory: Path) -> Mapping[str, Board]:
    if not directory.is_dir():
        raise CatalogError(f"{directory}: (directory): does not exist; valid: a directory of <board>.yaml files")
    boards = {f.stem: load_board_file(f) for f in sorted(directory.glob("*.yaml"))}
    return MappingProxyType(boards)


@functools.cache
def _board(key: str) -> Board:
    """One packaged board, loaded and validated once."""
    file = BOARDS_DIR / f"{key}.yaml"
    if not file.is_file():
        raise CatalogError(f"{file.name}: (file): does not exist in {BOARDS_DIR}; valid: one file per board of {', '.join(BOARD_KEYS)}")
    return load_board_file(file)


@functools.cache
def _default_catalog() -> Mapping[str, Board]:
    extra = sorted({f.stem for f in BOARDS_DIR.glob("*.yaml")} - set(BOARD_KEYS))
    if extra:
        raise CatalogError(f"{BOARDS_DIR}: (directory): unexpected boards {extra}; valid: {', '.join(BOARD_KEYS)}")
    return MappingProxyType({k: _board(k) for k in BOARD_KEYS})


def get_board(key: str) -> Board:
    """The board called ``key``; CatalogError naming the valid keys if unknown."""
    if key not in BOARD_KEYS:
        raise CatalogError(f"unknown board {key!r}; valid boards: {', '.join(BOARD_KEYS)}")
    return _board(key)


def all_boards() -> tuple[Board, ...]:
    """Every board of the catalog, in :data:`BOARD_KEYS` order."""
    return tuple(_default_catalog().values())
