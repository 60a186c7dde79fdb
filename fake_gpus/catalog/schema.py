"""Board files: parse one YAML file and validate every fact, each with its citation.

Every check fails with :class:`CatalogError` and a one-line message naming the file, the key and
what would have been valid.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from fake_gpus.catalog.fields import BOARD_FIELDS, CI_FIELDS, GI_FIELDS, GI_OPTIONAL, Ctx, collect_facts, sources_of, unique
from fake_gpus.catalog.layouts import layout_fits
from fake_gpus.catalog.model import (
    ARCHITECTURES,
    COMPUTE_SLICES,
    DEFAULT_SOURCE,
    GPUS_PER_NODE_MAX,
    MIG_MEMORY_SLICES,
    NVIDIA_PCI_VENDOR,
    Board,
    CatalogError,
    ComputeInstanceProfile,
    GpuInstanceProfile,
    ci_label,
)
from fake_gpus.mig_placement import max_disjoint_placements

__all__ = ["load_board_file"]

_GI_NAME = re.compile(r"^(?P<g>[1-8])g\.(?P<gb>\d+)gb(?P<suffix>[+-][a-z.,]+)?$")
_DRIVER_VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")
_ALLOWED_TOP = {"key", "sources", "gpu_instance_profiles", "mig_layouts", *BOARD_FIELDS}


def _check_placements(ctx: Ctx, key: str, gi: Mapping[str, Any], board_slices: int) -> tuple[int, ...]:
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


def _parse_ci(ctx: Ctx, key: str, raw: Any, gi_name: str, gi: Mapping[str, Any], path: str, sources: dict[str, str],
              names: list[Any]) -> ComputeInstanceProfile:
    if not isinstance(raw, dict):
        raise ctx.fail(key, f"is {type(raw).__name__}", "a mapping")
    name = raw.get("name")
    if not isinstance(name, str):
        raise ctx.fail(f"{key}.name", f"is {name!r}", "a profile name such as '1c.3g.40gb'")
    label = ci_label(name, raw.get("id"), names)
    key = f"{key}[{label}]"
    path = f"{path}.{label}"
    collect_facts(ctx, key, raw, {**CI_FIELDS, "name": ((str,), False)}, path, sources)
    extra = set(raw) - {*CI_FIELDS, "name", "sources"}
    if extra:
        raise ctx.fail(key, f"has unknown keys {sorted(extra)}", ", ".join(sorted({*CI_FIELDS, 'name', 'sources'})))
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
    return ComputeInstanceProfile(
        nvml_profile=raw["nvml_profile"], id=raw["id"], name=name, slice_count=slices, multiprocessors=raw["multiprocessors"]
    )


def _parse_gi(ctx: Ctx, index: int, raw: Any, board: Mapping[str, Any], sources: dict[str, str]) -> GpuInstanceProfile:
    key = f"gpu_instance_profiles[{index}]"
    if not isinstance(raw, dict):
        raise ctx.fail(key, f"is {type(raw).__name__}", "a mapping")
    name = raw.get("name")
    if not isinstance(name, str) or not (m := _GI_NAME.match(name)):
        raise ctx.fail(f"{key}.name", f"is {name!r}", "a MIG profile name such as '1g.10gb' or '1g.10gb+me'")
    key = f"gpu_instance_profiles[{name}]"
    path = f"gpu_instance_profiles.{name}"
    allowed = {*GI_FIELDS, *GI_OPTIONAL, "name", "sources", "compute_instance_profiles"}
    extra = set(raw) - allowed
    if extra:
        raise ctx.fail(key, f"has unknown keys {sorted(extra)}", ", ".join(sorted(allowed)))
    collect_facts(ctx, key, raw, {**GI_FIELDS, "name": ((str,), False)}, path, sources, GI_OPTIONAL)
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
    names = [ci.get("name") if isinstance(ci, dict) else None for ci in cis_raw]
    cis = tuple(
        _parse_ci(ctx, f"{key}.compute_instance_profiles", ci, name, raw, f"{path}.compute_instance_profiles", sources, names)
        for ci in cis_raw
    )
    unique(ctx, f"{key}.compute_instance_profiles", "id", [c.id for c in cis])
    unique(ctx, f"{key}.compute_instance_profiles", "nvml_profile", [c.nvml_profile for c in cis])
    spanning = [c for c in cis if c.slice_count == raw["slice_count"]]
    if not spanning:
        raise ctx.fail(f"{key}.compute_instance_profiles", "has no CI spanning the whole GI", f"one named {name!r}")
    # One CI spanning the whole GI has exactly the GI's SMs; a second one (the 1-slice CI of a
    # 1-slice GI over 2 memory slices) may have fewer.
    if raw["multiprocessors"] is not None and not any(c.multiprocessors == raw["multiprocessors"] for c in spanning):
        found = ", ".join(f"{c.name} (id {c.id}) {c.multiprocessors}" for c in spanning)
        raise ctx.fail(f"{key}.compute_instance_profiles", f"no CI spanning the whole GI has its multiprocessors ({found})",
                       f"one with the GI's {raw['multiprocessors']}")
    facts = {f: raw[f] for f in GI_FIELDS if f != "placements"}
    return GpuInstanceProfile(**facts, name=name, placements=placements, compute_instance_profiles=cis,
                              instance_limit_reason=raw.get("instance_limit_reason"))


def _check_board_facts(ctx: Ctx, raw: Mapping[str, Any], mig: bool) -> None:
    # a MIG board splits memory into the eighths or quarters of its guide table; a board without MIG has none
    if mig and raw["memory_slices"] not in MIG_MEMORY_SLICES:
        raise ctx.fail("memory_slices", f"is {raw['memory_slices']}", " or ".join(map(str, MIG_MEMORY_SLICES)))
    if not mig and raw["memory_slices"] != 0:
        raise ctx.fail("memory_slices", f"is {raw['memory_slices']} on a board without MIG profiles", "0 (no MIG)")
    if not 1 <= raw["gpus_per_node"] <= GPUS_PER_NODE_MAX:
        raise ctx.fail("gpus_per_node", f"is {raw['gpus_per_node']}", f"1 to {GPUS_PER_NODE_MAX} (the most GPUs of one board any node holds)")
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
        raise ctx.fail("cuda_compute_capability", f"is {cc!r:.40}", "[major, minor] integers")
    if not _DRIVER_VERSION.match(raw["driver_version"]):
        raise ctx.fail("driver_version", f"is {raw['driver_version']!r}", "digits like '580.95.05'")
    cuda = raw["cuda_driver_version"]
    if cuda < 1000 or cuda % 10:
        raise ctx.fail("cuda_driver_version", f"is {cuda}", "major*1000 + minor*10, e.g. 13000")


def _parse_layouts(ctx: Ctx, raw: Any, gis: tuple[GpuInstanceProfile, ...], sources: dict[str, str],
                   slices: int) -> Mapping[str, Mapping[str, int]]:
    if raw is None:
        return MappingProxyType({})
    if not isinstance(raw, dict) or not isinstance(raw.get("layouts"), dict):
        raise ctx.fail("mig_layouts", f"is {raw!r:.40}", "a mapping with 'layouts: {name: {profile: count}}' and 'sources'")
    srcs = sources_of(ctx, "mig_layouts", raw)
    names = {g.name: g for g in gis}
    out: dict[str, Mapping[str, int]] = {}
    for name, counts in raw["layouts"].items():
        key = f"mig_layouts.{name}"
        if not isinstance(counts, dict) or not counts:
            raise ctx.fail(key, f"is {counts!r:.40}", "a mapping of profile name -> instance count")
        for prof, n in counts.items():
            if prof not in names:
                raise ctx.fail(key, f"names unknown profile {prof!r}", ", ".join(sorted(names)))
            if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= names[prof].max_instances:
                raise ctx.fail(f"{key}.{prof}", f"is {n!r:.40}", f"1 to {names[prof].max_instances} (the profile's max_instances)")
        if not layout_fits(gis, counts, slices):
            raise ctx.fail(key, f"{counts} cannot be placed on one GPU",
                           f"counts whose placements fit disjointly in {slices} memory slices and "
                           f"{max(g.slice_count for g in gis)} compute slices")
        citation = srcs.get(name, srcs.get(DEFAULT_SOURCE))
        if not citation:
            raise ctx.fail(f"mig_layouts.sources.{name}", "has no citation", f"a citation under sources.{name} or sources.{DEFAULT_SOURCE}")
        sources[key] = citation
        out[name] = MappingProxyType(dict(counts))
    return MappingProxyType(out)


def _refuse_aliases(ctx: Ctx, raw: Any) -> None:
    """Refuse a list or mapping reached twice, which only a YAML alias makes.

    Ten lines of aliases can stand for 10**10 nodes (a "billion laughs"): the loader shares one object per
    alias, so the parsed file stays small, but any walk over it or error message quoting it expands it.
    Board files need no aliases. The walk goes in document order and visits each object once.
    """
    seen: set[int] = set()
    stack: list[tuple[str, Any]] = [("", raw)]
    while stack:
        path, node = stack.pop()
        if not isinstance(node, (dict, list)):
            continue
        if id(node) in seen:
            raise ctx.fail(path, "repeats a YAML node through an alias", "plain YAML without anchors (&name) or aliases (*name)")
        seen.add(id(node))
        items = list(node.items() if isinstance(node, dict) else enumerate(node))
        stack.extend((f"{path}.{k}" if path else str(k), v) for k, v in reversed(items))


def load_board_file(file: Path) -> Board:
    """Parse and validate one board file."""
    file = Path(file)
    ctx = Ctx(file)
    try:
        # libyaml's loader (same results, ~10x faster): every CLI command, the publisher and the plugin load the catalog
        raw = yaml.load(file.read_text(encoding="utf-8"), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except OSError as exc:
        raise CatalogError(f"{file.name}: (file): cannot be read ({exc.strerror}); valid: a readable YAML file") from exc
    except yaml.YAMLError as exc:
        where = getattr(exc, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise CatalogError(f"{file.name}: (file): is not valid YAML{line}; valid: a YAML mapping") from exc
    except ValueError as exc:  # a value YAML parses but Python refuses: an integer of over 4,300 digits, a 13th month
        raise CatalogError(f"{file.name}: (file): has a value that cannot be read ({str(exc).split(';')[0]}); valid: a YAML mapping") from exc
    if not isinstance(raw, dict):
        raise ctx.fail("(top level)", f"is {type(raw).__name__}", "a mapping")
    _refuse_aliases(ctx, raw)  # before anything reads the file's values
    key = raw.get("key")
    if key != file.stem:
        raise ctx.fail("key", f"is {key!r:.40} but the file is named {file.name!r}", repr(file.stem))
    extra = set(raw) - _ALLOWED_TOP
    if extra:
        raise ctx.fail("(top level)", f"has unknown keys {sorted(extra)}", ", ".join(sorted(_ALLOWED_TOP)))
    sources: dict[str, str] = {}
    collect_facts(ctx, "(board)", raw, BOARD_FIELDS, "", sources)
    gis_raw = raw.get("gpu_instance_profiles")
    # an empty list is a board without MIG (T4, L4, L40S); the key itself is required so that no MIG board loses its profiles by omission
    if not isinstance(gis_raw, list):
        raise ctx.fail("gpu_instance_profiles", "is missing", "a list of MIG GPU-instance profiles, or [] for a board without MIG")
    _check_board_facts(ctx, raw, bool(gis_raw))
    if not gis_raw and raw.get("mig_layouts") is not None:
        raise ctx.fail("mig_layouts", "is set on a board without MIG profiles", "omit it")
    gis = tuple(_parse_gi(ctx, i, gi, raw, sources) for i, gi in enumerate(gis_raw))
    unique(ctx, "gpu_instance_profiles", "name", [g.name for g in gis])
    unique(ctx, "gpu_instance_profiles", "id", [g.id for g in gis])
    unique(ctx, "gpu_instance_profiles", "nvml_profile", [g.nvml_profile for g in gis])
    layouts = _parse_layouts(ctx, raw.get("mig_layouts"), gis, sources, raw["memory_slices"])
    facts = {f: raw[f] for f in BOARD_FIELDS if f != "cuda_compute_capability"}
    cc = raw["cuda_compute_capability"]
    return Board(**facts, key=key, cuda_compute_capability=(cc[0], cc[1]), gpu_instance_profiles=gis,
                 sources=MappingProxyType(sources), mig_layouts=layouts)
