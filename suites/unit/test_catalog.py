"""Unit tests for the hardware catalog (fake_gpus.catalog)."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fake_gpus import catalog
from fake_gpus.catalog import (
    BOARD_KEYS,
    BOARDS_DIR,
    Board,
    CatalogError,
    find_placements,
    get_board,
    layout_fits,
    load_catalog,
    max_disjoint_placements,
)

PRESENT = [k for k in BOARD_KEYS if (BOARDS_DIR / f"{k}.yaml").is_file()]
MIG_BOARDS = [k for k in PRESENT if get_board(k).mig_capable]
WITHOUT_MIG = ("l4-24gb", "l40s-48gb", "t4-16gb")
H100 = "h100-80gb"
# NVIDIA MIG User Guide: memory slices and compute slices of each MIG board's profile table (A30 in quarters).
# (memory slices, compute slices) of the boards that are not 8/7: A30 from its guide table, RTX PRO 6000 from its real -lgipp
GEOMETRY = {"a30-24gb": (4, 4), "rtx-pro-6000-96gb": (12, 4)}

# DESIGN.md section 4: real `nvidia-smi mig -lgip` / `-lgipp` on an H100 80GB HBM3.
# name: (id, GiB as printed, SMs, CE, instances, placement starts, placement size)
H100_LGIP = {
    "1g.10gb": (19, "9.75", 16, 1, 7, (0, 1, 2, 3, 4, 5, 6), 1),
    "1g.10gb+me": (20, "9.75", 16, 1, 1, (0, 1, 2, 3, 4, 5, 6), 1),
    "1g.20gb": (15, "19.62", 26, 1, 4, (0, 2, 4, 6), 2),
    "2g.20gb": (14, "19.62", 32, 2, 3, (0, 2, 4), 2),
    "3g.40gb": (9, "39.50", 60, 3, 2, (0, 4), 4),
    "4g.40gb": (5, "39.50", 64, 4, 1, (0,), 4),
    "7g.80gb": (0, "79.25", 132, 8, 1, (0,), 8),
}

# nvml.h NVML_GPU_INSTANCE_PROFILE_* values.
NVML_GI = {"1_SLICE": 0, "2_SLICE": 1, "3_SLICE": 2, "4_SLICE": 3, "7_SLICE": 4, "1_SLICE_REV1": 7, "1_SLICE_REV2": 9}


def boards() -> list[Board]:
    return [get_board(k) for k in PRESENT]


# --------------------------------------------------------------------------- #
# Public API
# --------------------------------------------------------------------------- #


def test_board_keys_are_every_board_of_the_catalog() -> None:
    assert BOARD_KEYS == ("h100-80gb", "h100-nvl-94gb", "h200-141gb", "b200-180gb", "gb200-186gb", "b300-288gb", "gb300-288gb", "gh200-96gb",
                          "rtx-pro-6000-96gb",
                          "a100-40gb", "a100-80gb", "a30-24gb", "l4-24gb", "l40s-48gb", "t4-16gb")


def test_unknown_board_names_valid_keys() -> None:
    with pytest.raises(CatalogError) as err:
        get_board("v100-32gb")
    msg = str(err.value)
    assert "'v100-32gb'" in msg
    assert all(k in msg for k in BOARD_KEYS)
    assert "\n" not in msg


def test_catalog_error_is_value_error() -> None:
    assert issubclass(CatalogError, ValueError)


def test_every_board_file_is_present_and_loads() -> None:
    assert PRESENT == list(BOARD_KEYS), f"missing board files: {sorted(set(BOARD_KEYS) - set(PRESENT))}"
    assert [b.key for b in catalog.all_boards()] == list(BOARD_KEYS)


def test_loader_is_cached() -> None:
    assert get_board(H100) is get_board(H100)


def test_boards_are_frozen() -> None:
    board = get_board(H100)
    with pytest.raises(dataclasses.FrozenInstanceError):
        board.memory_mib = 1  # type: ignore[misc]
    with pytest.raises(TypeError):
        board.sources["memory_mib"] = "x"  # type: ignore[index]


def test_profile_lookup() -> None:
    board = get_board(H100)
    assert board.profile("3g.40gb").id == 9
    with pytest.raises(CatalogError, match="valid profiles: 1g.10gb"):
        board.profile("3g.20gb")


# --------------------------------------------------------------------------- #
# H100 facts from DESIGN.md section 4
# --------------------------------------------------------------------------- #


def test_h100_board_facts() -> None:
    b = get_board(H100)
    assert b.product_name == "NVIDIA H100 80GB HBM3"
    assert b.pci_device_id == 0x233010DE
    assert (b.architecture, b.nvml_architecture) == ("hopper", 9)
    assert (b.brand, b.nvml_brand) == ("nvidia", 14)
    assert b.cuda_compute_capability == (9, 0)
    assert b.multiprocessors == 132
    assert b.memory_slices == 8
    assert 80 * 1000 < b.memory_mib < 80 * 1024


@pytest.mark.parametrize("name", list(H100_LGIP))
def test_h100_lgip_row(name: str) -> None:
    pid, gib, sms, ce, instances, starts, size = H100_LGIP[name]
    p = get_board(H100).profile(name)
    assert p.id == pid
    # nvidia-smi prints memorySizeMB / 1024 with two decimals.
    assert f"{p.memory_mib / 1024:.2f}" == gib
    assert (p.multiprocessors, p.copy_engines, p.max_instances) == (sms, ce, instances)
    assert (p.placements, p.memory_slices) == (starts, size)


def test_h100_has_exactly_the_lgip_profiles() -> None:
    assert {p.name for p in get_board(H100).gpu_instance_profiles} == set(H100_LGIP)


def test_h100_enum_is_not_the_profile_id() -> None:
    """go-nvml's mocks used the enum as info.id; the real ids differ."""
    b = get_board(H100)
    assert b.profile("1g.10gb").nvml_profile == NVML_GI["1_SLICE"]
    assert b.profile("1g.10gb+me").nvml_profile == NVML_GI["1_SLICE_REV1"]
    assert b.profile("1g.20gb").nvml_profile == NVML_GI["1_SLICE_REV2"]
    assert b.profile("2g.20gb").nvml_profile == NVML_GI["2_SLICE"]
    assert b.profile("3g.40gb").nvml_profile == NVML_GI["3_SLICE"]
    assert b.profile("4g.40gb").nvml_profile == NVML_GI["4_SLICE"]
    assert b.profile("7g.80gb").nvml_profile == NVML_GI["7_SLICE"]


def test_h100_compute_slices() -> None:
    b = get_board(H100)
    assert [b.profile(n).slice_count for n in H100_LGIP] == [1, 1, 1, 2, 3, 4, 7]


# --------------------------------------------------------------------------- #
# Every board: placements and instance counts
# --------------------------------------------------------------------------- #


def _fits_without_overlap(starts: tuple[int, ...], size: int, count: int) -> bool:
    """Brute force: is there a set of ``count`` disjoint placements?"""
    for combo in itertools.combinations(starts, count):
        used: set[int] = set()
        ok = True
        for s in combo:
            span = set(range(s, s + size))
            if used & span:
                ok = False
                break
            used |= span
        if ok:
            return True
    return False


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_placements_fit_in_the_board_s_memory_slices(key: str) -> None:
    b = get_board(key)
    slices = GEOMETRY.get(key, (8, 7))[0]
    assert b.memory_slices == slices
    for p in b.gpu_instance_profiles:
        assert 1 <= p.memory_slices <= slices, p.name
        assert p.placements, p.name
        for start in p.placements:
            assert 0 <= start and start + p.memory_slices <= slices, (p.name, start)


@pytest.mark.parametrize("key", WITHOUT_MIG)
def test_a_board_without_mig_has_no_profiles_slices_or_layouts(key: str) -> None:
    b = get_board(key)
    assert (b.mig_capable, b.gpu_instance_profiles, b.memory_slices, b.compute_slices, dict(b.mig_layouts)) == (False, (), 0, 0, {})


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_max_instances_can_be_placed_without_overlap(key: str) -> None:
    for p in get_board(key).gpu_instance_profiles:
        assert _fits_without_overlap(p.placements, p.memory_slices, p.max_instances), p.name
        # Anything below what the placements allow must be explained.
        if not _fits_without_overlap(p.placements, p.memory_slices, p.max_instances + 1):
            assert p.instance_limit_reason is None, p.name
        else:
            assert p.instance_limit_reason, p.name


# A100's whole-GPU MIG profile (7g) holds 98 of the product's 108 SMs (real -lgip); every other board's holds all.
MIG_SMS_BELOW_BOARD = {"a100-40gb": (98, 108), "a100-80gb": (98, 108)}


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_full_gpu_profile_spans_all_slices(key: str) -> None:
    b = get_board(key)
    memory, compute = GEOMETRY.get(key, (8, 7))
    full = max(b.gpu_instance_profiles, key=lambda p: p.slice_count)
    assert (full.slice_count, full.memory_slices, full.placements, b.compute_slices) == (compute, memory, (0,), compute)
    assert (full.multiprocessors, b.multiprocessors) == MIG_SMS_BELOW_BOARD.get(key, (b.multiprocessors, b.multiprocessors))


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_ids_and_names_unique(key: str) -> None:
    gis = get_board(key).gpu_instance_profiles
    for attr in ("id", "name", "nvml_profile"):
        values = [getattr(p, attr) for p in gis]
        assert len(values) == len(set(values)), attr


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_profile_memory_and_sms_within_board(key: str) -> None:
    b = get_board(key)
    for p in b.gpu_instance_profiles:
        if p.memory_mib is not None:
            # A profile gets at most its memory slices' share of the board.
            assert 0 < p.memory_mib <= b.memory_mib * p.memory_slices / b.memory_slices, p.name
        if p.multiprocessors is not None:
            assert 0 < p.multiprocessors <= b.multiprocessors, p.name


def _go_nvlib_gb(board_mib: int, profile_mib: int) -> int:
    """The GB figure go-nvlib (and so NVIDIA's DRA driver) puts in a profile name."""
    fraction = math.ceil(profile_mib / board_mib * 8) / 8
    # Go's math.Round rounds halves away from zero (Python's round() would not).
    return math.floor(fraction * math.ceil(board_mib / 1024) + 0.5)


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_profile_names_match_what_the_dra_driver_derives(key: str) -> None:
    """The DRA driver names profiles from memorySizeMB; the catalog must agree."""
    b = get_board(key)
    for p in b.gpu_instance_profiles:
        if p.memory_mib is None:
            continue
        gb = int(p.name.split(".")[1].split("gb")[0])
        assert _go_nvlib_gb(b.memory_mib, p.memory_mib) == gb, p.name


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_compute_instance_profiles(key: str) -> None:
    b = get_board(key)
    one_slice_sms = min(p.multiprocessors for p in b.gpu_instance_profiles if p.slice_count == 1)
    for gi in b.gpu_instance_profiles:
        full = [c for c in gi.compute_instance_profiles if c.slice_count == gi.slice_count]
        assert [c.multiprocessors for c in full if c.multiprocessors == gi.multiprocessors] != [], gi.name
        # only a 1-slice GI over 2 memory slices with more SMs than the plain 1g (NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2 = 9 on
        # Hopper and Blackwell) has a second spanning CI; on A100 that GI has the 1g's SMs and one CI
        assert len(full) == (2 if gi.nvml_profile == 9 and gi.multiprocessors > one_slice_sms else 1), gi.name
        for c in gi.compute_instance_profiles:
            assert c.slice_count <= gi.slice_count, c.name
            if None not in (c.multiprocessors, gi.multiprocessors):
                assert c.multiprocessors <= gi.multiprocessors, c.name


# --------------------------------------------------------------------------- #
# Sources
# --------------------------------------------------------------------------- #

BOARD_FACTS = [
    f.name for f in dataclasses.fields(Board) if f.name not in {"key", "gpu_instance_profiles", "sources", "mig_layouts"}
]
GI_FACTS = [f.name for f in dataclasses.fields(catalog.GpuInstanceProfile) if f.name not in {"compute_instance_profiles", "instance_limit_reason"}]
CI_FACTS = [f.name for f in dataclasses.fields(catalog.ComputeInstanceProfile)]


@pytest.mark.parametrize("key", PRESENT)
def test_every_fact_has_a_source(key: str) -> None:
    b = get_board(key)
    expected = set(BOARD_FACTS)
    for p in b.gpu_instance_profiles:
        base = f"gpu_instance_profiles.{p.name}"
        expected |= {f"{base}.{f}" for f in GI_FACTS}
        for c in p.compute_instance_profiles:
            expected |= {f"{base}.compute_instance_profiles.{p.ci_label(c)}.{f}" for f in CI_FACTS}
    missing = expected - set(b.sources)
    assert not missing, sorted(missing)[:5]
    assert all(isinstance(s, str) and s.strip() for s in b.sources.values())


@pytest.mark.parametrize("key", PRESENT)
def test_unknown_facts_are_null(key: str) -> None:
    b = get_board(key)
    for fact in BOARD_FACTS:
        value, source = getattr(b, fact), b.sources[fact]
        assert (value is None) == source.startswith("unknown"), fact
    for p in b.gpu_instance_profiles:
        for fact in GI_FACTS:
            source = b.sources[f"gpu_instance_profiles.{p.name}.{fact}"]
            assert (getattr(p, fact) is None) == source.startswith("unknown"), (p.name, fact)
    assert set(b.unknown_facts()) == {k for k, v in b.sources.items() if v == "unknown"}


# Board facts no public source gave, per board (null with source "unknown"): the PCI subsystem ids no capture showed,
# and the whole-GPU engine counts of boards without MIG (NVML reports engines per MIG profile only).
ENGINES = ("copy_engines", "decoders", "encoders", "jpeg_engines", "ofa_engines")
KNOWN_GAPS = {"a100-40gb": ("pci_subsystem_id",), "a100-80gb": ("pci_subsystem_id",), "a30-24gb": ("pci_subsystem_id",),
              "b300-288gb": ("pci_subsystem_id",), "gb300-288gb": ("pci_subsystem_id",),
              "gh200-96gb": ("pci_subsystem_id",), "rtx-pro-6000-96gb": ("pci_subsystem_id",),
              "l4-24gb": ENGINES, "t4-16gb": ENGINES, "l40s-48gb": ("pci_subsystem_id", *ENGINES)}


@pytest.mark.parametrize("key", PRESENT)
def test_every_board_is_complete(key: str) -> None:
    """Every fact of every board has a value (measured, published or derived by a stated rule) but the gaps listed above."""
    b = get_board(key)
    assert all(p.complete for p in b.gpu_instance_profiles)
    assert sorted(b.unknown_facts()) == sorted(KNOWN_GAPS.get(key, ()))


# --------------------------------------------------------------------------- #
# MIG layouts
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_named_layouts_fit(key: str) -> None:
    b = get_board(key)
    assert "all-balanced" in b.mig_layouts
    for name, counts in b.mig_layouts.items():
        assert layout_fits(b.gpu_instance_profiles, counts, b.memory_slices), name
        assert b.sources[f"mig_layouts.{name}"]


@pytest.mark.parametrize(
    ("counts", "fits"),
    [
        ({"4g.40gb": 1, "3g.40gb": 1}, True),
        ({"4g.40gb": 1, "3g.40gb": 2}, False),  # memory slices overlap
        ({"2g.20gb": 3, "1g.10gb": 1}, True),
        ({"2g.20gb": 3, "1g.10gb": 2}, False),  # 8 compute slices
        ({"1g.10gb+me": 2}, False),  # over max_instances
        ({"1g.20gb": 4}, True),
        ({"7g.80gb": 1, "1g.10gb": 1}, False),
    ],
)
def test_layout_fits_on_h100(counts: dict[str, int], fits: bool) -> None:
    assert layout_fits(get_board(H100).gpu_instance_profiles, counts, 8) is fits


def test_layout_fits_over_the_slices_it_is_given() -> None:
    # the slice count is the board's, passed in: over 4 slices a 4g (4 slices at 0) fits, two 3g.40gb (0 and 4) do not
    gis = get_board(H100).gpu_instance_profiles
    assert layout_fits(gis, {"3g.40gb": 2}, 8) and not layout_fits(gis, {"3g.40gb": 2}, 4)
    assert layout_fits(gis, {"4g.40gb": 1}, 4)


# --------------------------------------------------------------------------- #
# Corrupt files
# --------------------------------------------------------------------------- #


def _h100_raw() -> dict:
    return yaml.safe_load((BOARDS_DIR / f"{H100}.yaml").read_text())


def _write(tmp_path: Path, raw: dict, name: str = H100) -> Path:
    (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(raw, sort_keys=False))
    return tmp_path


def test_copy_of_real_file_loads_from_other_directory(tmp_path: Path) -> None:
    shutil.copy(BOARDS_DIR / f"{H100}.yaml", tmp_path)
    loaded = load_catalog(tmp_path)
    assert loaded[H100] == get_board(H100)


def _gi(raw: dict, name: str) -> dict:
    return next(p for p in raw["gpu_instance_profiles"] if p["name"] == name)


def _rename(raw: dict, old: str, new: str) -> None:
    gi = _gi(raw, old)
    gi["name"] = new
    for ci in gi["compute_instance_profiles"]:
        ci["name"] = ci["name"].replace(old, new)


CORRUPTIONS = {
    "placement past slice 8": (lambda r: _gi(r, "3g.40gb").__setitem__("placements", [0, 4, 8]), "3g.40gb", "placements"),
    "misaligned start": (lambda r: _gi(r, "2g.20gb").__setitem__("placements", [0, 3]), "2g.20gb", "placements"),
    "too many instances": (lambda r: _gi(r, "3g.40gb").__setitem__("max_instances", 3), "3g.40gb", "max_instances"),
    "unexplained low limit": (lambda r: _gi(r, "1g.10gb").__setitem__("max_instances", 5), "1g.10gb", "max_instances"),
    "duplicate id": (lambda r: _gi(r, "4g.40gb").__setitem__("id", 9), "gpu_instance_profiles", "id"),
    "duplicate name": (lambda r: _rename(r, "1g.10gb+me", "1g.10gb"), "gpu_instance_profiles", "name"),
    "string count": (lambda r: _gi(r, "7g.80gb").__setitem__("multiprocessors", "132"), "7g.80gb", "multiprocessors"),
    "missing board fact": (lambda r: r.pop("memory_mib"), "memory_mib", "missing"),
    "missing source": (lambda r: r["sources"].pop("product_name"), "product_name", "citation"),
    "null without unknown": (lambda r: r.__setitem__("decoders", None), "decoders", "unknown"),
    "value marked unknown": (lambda r: r["sources"].__setitem__("decoders", "unknown"), "decoders", "unknown"),
    "seven memory slices": (lambda r: r.__setitem__("memory_slices", 7), "memory_slices", "4 or 8"),
    "profiles dropped but slices kept": (lambda r: (r.__setitem__("gpu_instance_profiles", []), r.pop("mig_layouts")), "memory_slices", "0 (no MIG)"),
    "profiles key missing": (lambda r: r.pop("gpu_instance_profiles"), "gpu_instance_profiles", "[] for a board without MIG"),
    "layouts without MIG": (lambda r: (r.__setitem__("gpu_instance_profiles", []), r.__setitem__("memory_slices", 0)), "mig_layouts", "omit it"),
    "no GPUs per node": (lambda r: r.__setitem__("gpus_per_node", 0), "gpus_per_node", "1 to 8"),
    "more GPUs per node than any server": (lambda r: r.__setitem__("gpus_per_node", 9), "gpus_per_node", "1 to 8"),
    "missing GPUs per node": (lambda r: r.pop("gpus_per_node"), "gpus_per_node", "missing"),
    "slice count vs name": (lambda r: _gi(r, "2g.20gb").__setitem__("slice_count", 3), "2g.20gb", "slice_count"),
    "bad pci id": (lambda r: r.__setitem__("pci_device_id", 0x2330), "pci_device_id", "0x10DE"),
    # NVML's unsigned int: a larger fact wrapped silently in the fake NVML
    "pci id over 32 bits": (lambda r: r.__setitem__("pci_device_id", (0x12330 << 16) | 0x10DE), "pci_device_id", "0 to 4294967295"),
    "huge GI profile id": (lambda r: _gi(r, "1g.10gb").__setitem__("nvml_profile", 2**40), "1g.10gb].nvml_profile: is too large (1099511627776)", "unsigned int"),
    "huge CI id": (lambda r: _gi(r, "3g.40gb")["compute_instance_profiles"][0].__setitem__("id", 2**200),
                   "id: is too large (a 201-bit integer)", "0 to 4294967295"),
    "wrong key": (lambda r: r.__setitem__("key", "h200-141gb"), "key", "h100-80gb"),
    "memory over share": (lambda r: _gi(r, "1g.10gb").__setitem__("memory_mib", 20096), "1g.10gb", "memory_mib"),
    "full CI SMs differ": (lambda r: _gi(r, "3g.40gb")["compute_instance_profiles"][-1].__setitem__("multiprocessors", 48), "3g.40gb", "multiprocessors"),
    "citation without class": (lambda r: r["sources"].__setitem__("memory_mib", "real nvidia-smi somewhere"), "sources.memory_mib", "class"),
    "layout overlaps": (lambda r: r["mig_layouts"]["layouts"].__setitem__("x", {"3g.40gb": 2, "4g.40gb": 1}), "mig_layouts.x", "cannot be placed"),
    "layout unknown profile": (lambda r: r["mig_layouts"]["layouts"].__setitem__("y", {"3g.20gb": 1}), "mig_layouts.y", "3g.40gb"),
}


@pytest.mark.parametrize("case", list(CORRUPTIONS))
def test_corrupt_file_names_file_and_key(tmp_path: Path, case: str) -> None:
    corrupt, key, hint = CORRUPTIONS[case]
    raw = _h100_raw()
    corrupt(raw)
    with pytest.raises(CatalogError) as err:
        load_catalog(_write(tmp_path, raw))
    msg = str(err.value)
    assert msg.startswith(f"{H100}.yaml: "), msg
    assert key in msg and hint in msg, msg
    assert "valid" in msg and "\n" not in msg, msg


def test_invalid_yaml_names_file(tmp_path: Path) -> None:
    (tmp_path / "b200-180gb.yaml").write_text("key: b200-180gb\nmemory_mib: [1,\n")
    with pytest.raises(CatalogError, match=r"^b200-180gb\.yaml: .*YAML"):
        load_catalog(tmp_path)


def test_an_integer_python_will_not_read_is_refused_in_one_line(tmp_path: Path) -> None:
    # YAML parses 5,000 digits; Python's int() refuses past 4,300 with a ValueError, which was a traceback
    (tmp_path / "b200-180gb.yaml").write_text(f"key: b200-180gb\nmemory_mib: {'9' * 5000}\n")
    with pytest.raises(CatalogError, match=r"^b200-180gb\.yaml: \(file\): has a value that cannot be read \(Exceeds the limit \(4300 digits\) "
                       r"for integer string conversion: value has 5000 digits\); valid: a YAML mapping$"):
        load_catalog(tmp_path)


# A billion laughs inside an allowed key: ten aliased levels of ten stand for 10**10 strings in a few
# lines. The loader must refuse it from the parsed file, never expand it (an error message quoting it did).
YAML_BOMB = "[&l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol], " + ", ".join(
    f"&l{i} [{', '.join([f'*l{i - 1}'] * 10)}]" for i in range(1, 10)) + "]"

LOAD_UNDER_A_CEILING = """
import resource, sys
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a regression dies of MemoryError here, not in the OOM killer
from fake_gpus.catalog import CatalogError, load_board_file
try:
    load_board_file(Path(sys.argv[1]))
except CatalogError as exc:
    print(exc)
"""


@pytest.mark.parametrize("field", ["key", "product_name", "cuda_compute_capability"])  # each was quoted whole in its error
def test_a_yaml_alias_bomb_is_refused_without_expanding_it(tmp_path: Path, field: str) -> None:
    text = (BOARDS_DIR / f"{H100}.yaml").read_text()
    bomb = tmp_path / f"{H100}.yaml"
    bomb.write_text(re.sub(rf"^{field}: .*$", lambda _: f"{field}: {YAML_BOMB}", text, count=1, flags=re.M))
    done = subprocess.run([sys.executable, "-c", LOAD_UNDER_A_CEILING, str(bomb)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parents[2])  # imports this checkout's fake_gpus
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert done.stdout.strip() == (f"{H100}.yaml: {field}.1.0: repeats a YAML node through an alias; "
                                   "valid: plain YAML without anchors (&name) or aliases (*name)"), done.stdout


def test_a_board_file_that_repeats_a_node_through_an_alias_is_refused(tmp_path: Path) -> None:
    raw = _h100_raw()
    raw["mig_layouts"]["layouts"]["again"] = raw["mig_layouts"]["layouts"]["all-7g.80gb"]  # safe_dump writes &id001 / *id001
    with pytest.raises(CatalogError, match=r"^h100-80gb\.yaml: mig_layouts\.layouts\.again: repeats a YAML node through an alias; valid: "):
        load_catalog(_write(tmp_path, raw))


def test_missing_directory(tmp_path: Path) -> None:
    with pytest.raises(CatalogError, match="does not exist"):
        load_catalog(tmp_path / "nope")


def test_max_disjoint_placements() -> None:
    assert max_disjoint_placements((0, 1, 2, 3, 4, 5, 6), 1) == 7
    assert max_disjoint_placements((0, 2, 4, 6), 2) == 4
    assert max_disjoint_placements((0, 4), 4) == 2
    assert max_disjoint_placements((0, 2, 4), 4) == 2


def test_find_placements_answers_in_input_order() -> None:
    # a 4-slice instance must take 0 or 4; the 1-slice ones go around it, answered in the order asked
    runs = find_placements([[(s, 1) for s in range(7)], [(0, 4), (4, 4)], [(s, 1) for s in range(7)]], 8)
    assert runs is not None and runs[1] in ((0, 4), (4, 4))
    used = [slot for start, size in runs for slot in range(start, start + size)]
    assert len(used) == len(set(used)) == 6
    assert find_placements([[(0, 4), (4, 4)]] * 3, 8) is None  # three halves do not fit
    assert find_placements([[(4, 8)]], 8) is None  # a run past the last slice is never chosen
    assert find_placements([], 8) == []
    assert find_placements([[(0, 4), (4, 4)]] * 2, 8) is not None and find_placements([[(0, 4), (4, 4)]] * 2, 4) is None  # the slices given bound it
