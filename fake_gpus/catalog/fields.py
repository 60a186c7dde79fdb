"""Fact fields of a board file: their types, and the rule that every fact cites its source."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from fake_gpus.catalog.model import DEFAULT_SOURCE, PROVENANCE_CLASSES, UNKNOWN, CatalogError, provenance_class

__all__ = ["BOARD_FIELDS", "CI_FIELDS", "GI_FIELDS", "GI_OPTIONAL", "Ctx", "FieldSpec", "collect_facts", "sources_of", "unique"]

FieldSpec = dict[str, tuple[tuple[type, ...], bool]]  # name -> (accepted types, nullable)

# Every integer fact reaches the fake NVML as a C `unsigned int` (profile ids, PCI ids, counts; memory in MiB):
# a larger one would wrap there silently.
UINT_MAX = 0xFFFFFFFF

BOARD_FIELDS: FieldSpec = {
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
    "gpus_per_node": ((int,), False),
}

GI_FIELDS: FieldSpec = {
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
GI_OPTIONAL: FieldSpec = {
    "instance_limit_reason": ((str,), True),
}

CI_FIELDS: FieldSpec = {
    "nvml_profile": ((int,), False),
    "id": ((int,), False),
    "slice_count": ((int,), False),
    "multiprocessors": ((int,), True),
}



class Ctx:
    """Error context: which file and which key path is being checked."""

    def __init__(self, file: Path) -> None:
        self.file = file

    def fail(self, key: str, problem: str, valid: str) -> CatalogError:
        return CatalogError(f"{self.file.name}: {key}: {problem}; valid: {valid}")


def type_names(types: tuple[type, ...]) -> str:
    names = {int: "integer", str: "string", list: "list", bool: "boolean", dict: "mapping"}
    return " or ".join(names.get(t, t.__name__) for t in types)


def check_type(ctx: Ctx, key: str, value: Any, types: tuple[type, ...], nullable: bool) -> None:
    if value is None:
        if not nullable:
            raise ctx.fail(key, "is null but this fact is required", type_names(types))
        return
    # bool is an int subclass in Python; a yes/no in a count field is a typo.
    if isinstance(value, bool) and bool not in types:
        raise ctx.fail(key, f"is a boolean ({value})", type_names(types))
    if not isinstance(value, types):
        raise ctx.fail(key, f"has type {type(value).__name__} ({value!r:.40})", type_names(types))
    if isinstance(value, int) and not isinstance(value, bool) and not 0 <= value <= UINT_MAX:
        # a huge one's digits are not quoted: str() of it is slow, and refused past 4,300 digits
        shown = str(value) if value.bit_length() <= 64 else f"a {value.bit_length()}-bit integer"
        raise ctx.fail(key, f"is {'negative' if value < 0 else 'too large'} ({shown})", f"0 to {UINT_MAX} (NVML's unsigned int)")


def sources_of(ctx: Ctx, key: str, raw: Mapping[str, Any]) -> dict[str, str]:
    sources = raw.get("sources")
    if not isinstance(sources, dict) or not sources:
        raise ctx.fail(f"{key}.sources", "is missing or empty", "a mapping of fact name -> citation")
    for name, citation in sources.items():
        if not isinstance(citation, str) or not citation.strip():
            raise ctx.fail(f"{key}.sources.{name}", f"is {citation!r}", "a non-empty citation string")
        if citation != UNKNOWN and (provenance_class(citation) == UNKNOWN or not citation.split(":", 1)[1].strip()):
            classes = ", ".join(f"'{c}: ...'" for c in PROVENANCE_CLASSES)
            raise ctx.fail(f"{key}.sources.{name}", f"{citation[:40]!r} does not start with its class", f"{classes} or '{UNKNOWN}'")
    return sources


def collect_facts(
    ctx: Ctx,
    key: str,
    raw: Mapping[str, Any],
    fields: Mapping[str, tuple[tuple[type, ...], bool]],
    path: str,
    out_sources: dict[str, str],
    optional: Mapping[str, tuple[tuple[type, ...], bool]] | None = None,
) -> None:
    """Type-check ``fields`` of ``raw`` and record each fact's citation."""
    sources = sources_of(ctx, key, raw)
    allowed = {*fields, *(optional or {}), DEFAULT_SOURCE}
    for name in sources:
        if name not in allowed:
            raise ctx.fail(f"{key}.sources.{name}", "names no fact of this entry", ", ".join(sorted(allowed)))
    checks = {**fields, **{k: v for k, v in (optional or {}).items() if k in raw}}
    for name, (types, nullable) in checks.items():
        if name not in raw:
            raise ctx.fail(f"{key}.{name}", "is missing", type_names(types))
        value = raw[name]
        check_type(ctx, f"{key}.{name}", value, types, nullable)
        citation = sources.get(name, sources.get(DEFAULT_SOURCE))
        if citation is None:
            raise ctx.fail(f"{key}.sources.{name}", "has no citation", f"a citation under sources.{name} or sources.{DEFAULT_SOURCE}")
        # An unknown fact must say so, and a fact said to be unknown must be null.
        if value is None and not citation.startswith(UNKNOWN):
            raise ctx.fail(f"{key}.{name}", f"is null but its source is {citation!r}", f"a value, or null with source '{UNKNOWN}'")
        if value is not None and citation.startswith(UNKNOWN):
            raise ctx.fail(f"{key}.{name}", f"has value {value!r} but its source is {citation!r}", "null for an unknown fact, or a real citation")
        out_sources[f"{path}.{name}" if path else name] = citation


def unique(ctx: Ctx, key: str, what: str, values: list[Any]) -> None:
    seen: set[Any] = set()
    for v in values:
        if v in seen:
            raise ctx.fail(key, f"repeats {what} {v!r}", f"each {what} once")
        seen.add(v)
