"""Every catalog fact against its provenance: published facts against rows transcribed here from
NVIDIA's tables (never read back from the catalog), derived facts recomputed from their stated rule,
measured ids against the public captures they cite."""

from __future__ import annotations

import pytest

from fake_gpus.catalog import BOARD_KEYS, Board, CatalogError, get_board, layout_fits
from fake_gpus.catalog.model import PROVENANCE_CLASSES, provenance_class

B200, GB200 = "b200-180gb", "gb200-186gb"
B300, GB300 = "b300-288gb", "gb300-288gb"

# NVIDIA MIG User Guide, "Supported MIG Profiles", table "GPU Instance Profiles on B200":
# name: (memory eighths, compute sevenths, copy engines, instances, OFA)
B200_GUIDE = {
    "1g.23gb": (1, 1, 2, 7, 0),
    "1g.23gb+me": (1, 1, 2, 1, 1),
    "1g.45gb": (2, 1, 2, 4, 0),
    "2g.45gb": (2, 2, 3, 3, 0),
    "3g.90gb": (4, 3, 6, 2, 0),
    "4g.90gb": (4, 4, 8, 1, 0),
    "7g.180gb": (8, 7, 16, 1, 1),
}
GUIDE_FIELDS = ("memory_slices", "slice_count", "copy_engines", "max_instances", "ofa_engines")
# Where a measured row disagrees with the guide, the measured value stands (SOURCES.md).
MEASURED_OVER_GUIDE = {("2g.45gb", "copy_engines"): (4, 3)}

# GKE's GPU partitioner (partition sizes per board) and NVIDIA's default mig-parted config
# (gpu-operator assets/state-mig-manager/0400_configmap.yaml): profile name -> instances.
GKE_PARTITIONS = {
    B200: {"1g.23gb": 7, "1g.45gb": 4, "2g.45gb": 3, "3g.90gb": 2, "7g.180gb": 1},
    GB200: {"1g.23gb": 7, "1g.47gb": 4, "2g.47gb": 3, "3g.93gb": 2, "7g.186gb": 1},
}
MIG_PARTED_BALANCED = {
    B200: {"1g.23gb": 2, "2g.45gb": 1, "3g.90gb": 1},
    GB200: {"1g.23gb": 2, "2g.47gb": 1, "3g.93gb": 1},
}
MIG_PARTED_DEVICE_FILTER = {
    "h100-80gb": 0x233010DE, "h100-nvl-94gb": 0x232110DE, "h200-141gb": 0x233510DE, B200: 0x290110DE, GB200: 0x294110DE,
    "a100-40gb": 0x20B010DE, "a100-80gb": 0x20B210DE, "a30-24gb": 0x20B710DE, B300: 0x318210DE, GB300: 0x31C210DE,
    "gh200-96gb": 0x234210DE, "rtx-pro-6000-96gb": 0x2BB510DE,
}
# Boards without MIG are in no mig-parted config: their ids are the `nvidia-smi -q` "Device Id" lines the files cite
# (L40S: the PCI ID repository's 10de:26b9).
DEVICE_ID_CAPTURED = {"l4-24gb": 0x27B810DE, "t4-16gb": 0x1EB810DE, "l40s-48gb": 0x26B910DE}

# PCI subsystem ids in the public `nvidia-smi -q` / `lspci -nn` captures the board files cite (None: no capture found).
PCI_SUBSYSTEM = {
    "h100-80gb": 0x16C110DE, "h100-nvl-94gb": 0x183910DE, "h200-141gb": 0x18BE10DE, B200: 0x199910DE, GB200: 0x204610DE,
    "a100-40gb": None, "a100-80gb": None, "a30-24gb": None, "l4-24gb": 0x16CA10DE, "t4-16gb": 0x12A210DE, "l40s-48gb": None,
    B300: None, GB300: None, "gh200-96gb": None, "rtx-pro-6000-96gb": None,
}
# The only facts a board may leave unknown (null, source "unknown"): a subsystem id no capture showed, and the
# whole-GPU engine counts of a board without MIG (NVML reports engines per MIG profile only).
MAY_BE_UNKNOWN = {"pci_subsystem_id", "copy_engines", "decoders", "encoders", "jpeg_engines", "ofa_engines"}

# Real `nvidia-smi mig -lgip` of the Ampere boards as the files cite them:
# name: (ID, GiB as printed, SM, DEC, ENC, CE, JPEG, OFA, instances). A100 80GB's 1g.20gb is not in its 515-driver capture.
AMPERE_LGIP = {
    "a100-40gb": {
        "1g.5gb": (19, "4.75", 14, 0, 0, 1, 0, 0, 7), "1g.5gb+me": (20, "4.75", 14, 1, 0, 1, 1, 1, 1),
        "1g.10gb": (15, "9.62", 14, 1, 0, 1, 0, 0, 4), "2g.10gb": (14, "9.62", 28, 1, 0, 2, 0, 0, 3),
        "3g.20gb": (9, "19.50", 42, 2, 0, 3, 0, 0, 2), "4g.20gb": (5, "19.50", 56, 2, 0, 4, 0, 0, 1),
        "7g.40gb": (0, "39.25", 98, 5, 0, 7, 1, 1, 1),
    },
    "a100-80gb": {
        "1g.10gb": (19, "9.50", 14, 0, 0, 1, 0, 0, 7), "1g.10gb+me": (20, "9.50", 14, 1, 0, 1, 1, 1, 1),
        "2g.20gb": (14, "19.50", 28, 1, 0, 2, 0, 0, 3), "3g.40gb": (9, "39.25", 42, 2, 0, 3, 0, 0, 2),
        "4g.40gb": (5, "39.25", 56, 2, 0, 4, 0, 0, 1), "7g.80gb": (0, "79.00", 98, 5, 0, 7, 1, 1, 1),
    },
    "a30-24gb": {
        "1g.6gb": (14, "5.81", 14, 1, 0, 1, 0, 0, 4), "1g.6gb+me": (21, "5.81", 14, 1, 0, 1, 1, 1, 1),
        "2g.12gb": (5, "11.69", 28, 2, 0, 2, 0, 0, 2), "2g.12gb+me": (6, "11.69", 28, 2, 0, 2, 1, 1, 1),
        "4g.24gb": (0, "23.44", 56, 4, 0, 4, 1, 1, 1),
    },
}
LGIP_FIELDS = ("id", "memory_mib", "multiprocessors", "decoders", "encoders", "copy_engines", "jpeg_engines", "ofa_engines", "max_instances")
# NVIDIA/mig-parted's default config: all-balanced per PCI device id of the Ampere boards.
AMPERE_BALANCED = {"a100-40gb": {"1g.5gb": 2, "2g.10gb": 1, "3g.20gb": 1}, "a100-80gb": {"1g.10gb": 2, "2g.20gb": 1, "3g.40gb": 1},
                   "a30-24gb": {"1g.6gb": 2, "2g.12gb": 1}}

# Real `nvidia-smi mig -lgip` of the Hopper boards, GiB as printed, for the 4- and 8-memory-slice rows.
HOPPER_BIG_ROWS_GIB = {
    "h100-80gb": {4: "39.50", 8: "79.25"},
    "h100-nvl-94gb": {4: "46.38", 8: "93.12"},
    "h200-141gb": {4: "69.50", 8: "139.75"},
}
HOPPER = tuple(HOPPER_BIG_ROWS_GIB)
BLACKWELL = (B200, GB200, B300, GB300)
MIG_BOARDS = tuple(k for k in BOARD_KEYS if get_board(k).mig_capable)

# The derivation rules the Blackwell 3g/4g/7g rows state (board memory share by memory slices).
MEMORY_SHARE = {4: 0.4953, 8: 0.995}


def _gib_to_mib(printed: str) -> int:
    """-lgip prints MiB/1024 to two decimals; the real value sits on a 1/8 GiB step."""
    return round(float(printed) * 8) * 128


def _memory_rule(board_mib: int, memory_slices: int) -> int:
    return round(board_mib * MEMORY_SHARE[memory_slices] / 128) * 128


def _nearest_even(x: float) -> int:
    low = 2 * int(x // 2)
    return low if x - low <= low + 2 - x else low + 2


def _cls(b: Board, path: str) -> str:
    return b.provenance(path)[0]


def _gi_path(name: str, fact: str) -> str:
    return f"gpu_instance_profiles.{name}.{fact}"


def _plain(b: Board) -> dict[int, object]:
    """The board's profiles without memory or media variants, by compute slices (1g, 2g, 3g, 4g, 7g)."""
    return {p.slice_count: p for p in b.gpu_instance_profiles if p.nvml_profile in (0, 1, 2, 3, 4)}


# --------------------------------------------------------------------------- #
# Classes
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("key", BOARD_KEYS)
def test_every_fact_has_a_class_and_a_source(key: str) -> None:
    b = get_board(key)
    by_class = b.facts_by_class()
    assert set(by_class) == {*PROVENANCE_CLASSES, "unknown"}
    assert sum(len(v) for v in by_class.values()) == len(b.sources)
    assert set(by_class["unknown"]) <= MAY_BE_UNKNOWN
    for path in set(b.sources) - set(by_class["unknown"]):
        cls, text = b.provenance(path)
        assert cls in PROVENANCE_CLASSES and len(text) > 10, (path, text)


def test_provenance_of_a_missing_fact_names_it() -> None:
    with pytest.raises(CatalogError, match="no fact 'gpu_instance_profiles.9g.1gb.memory_mib'"):
        get_board(B200).provenance("gpu_instance_profiles.9g.1gb.memory_mib")


def test_provenance_class_parses_the_prefix() -> None:
    assert provenance_class("measured: real nvidia-smi") == "measured"
    assert provenance_class("derived: 2 x the 2g row") == "derived"
    assert provenance_class("unknown") == "unknown"
    assert provenance_class("real nvidia-smi: no class") == "unknown"


# --------------------------------------------------------------------------- #
# Published facts against the transcriptions above
# --------------------------------------------------------------------------- #


def test_b200_published_facts_match_the_mig_user_guide() -> None:
    b = get_board(B200)
    assert {p.name for p in b.gpu_instance_profiles} == set(B200_GUIDE)
    checked = 0
    for name, row in B200_GUIDE.items():
        p = b.profile(name)
        for fact, guide in zip(GUIDE_FIELDS, row):
            value, cls = getattr(p, fact), _cls(b, _gi_path(name, fact))
            if cls == "published":
                assert value == guide, (name, fact)
                checked += 1
            elif value != guide:
                assert cls == "measured" and MEASURED_OVER_GUIDE[(name, fact)] == (value, guide), (name, fact, cls)
    # the rows no real output showed stand on the guide alone
    for name in ("3g.90gb", "4g.90gb", "7g.180gb"):
        assert {_cls(b, _gi_path(name, f)) for f in GUIDE_FIELDS} == {"published"}, name
    assert checked >= 15


def test_gb200_big_rows_follow_the_b200_table() -> None:
    """GB200 has no table of its own: its 3g/4g/7g rows take the B200 row of the same shape (same GB100 chip)."""
    g, b = _plain(get_board(GB200)), get_board(B200)
    for slices, b200_name in ((3, "3g.90gb"), (4, "4g.90gb"), (7, "7g.180gb")):
        p = g[slices]
        assert tuple(getattr(p, f) for f in GUIDE_FIELDS) == B200_GUIDE[b200_name]
        assert {_cls(get_board(GB200), _gi_path(p.name, f)) for f in GUIDE_FIELDS} == {"derived"}
        assert b.profile(b200_name).copy_engines == p.copy_engines


@pytest.mark.parametrize("key", list(GKE_PARTITIONS))
def test_blackwell_names_and_instances_match_gke_and_mig_parted(key: str) -> None:
    b = get_board(key)
    for name, count in GKE_PARTITIONS[key].items():
        assert b.profile(name).max_instances == count, name
    assert dict(b.mig_layouts["all-balanced"]) == MIG_PARTED_BALANCED[key]
    for name in GKE_PARTITIONS[key]:
        assert dict(b.mig_layouts[f"all-{name}"]) == {name: GKE_PARTITIONS[key][name]}


@pytest.mark.parametrize("key", BOARD_KEYS)
def test_pci_ids_match_the_captures(key: str) -> None:
    b = get_board(key)
    assert b.pci_device_id == {**MIG_PARTED_DEVICE_FILTER, **DEVICE_ID_CAPTURED}[key]
    assert b.pci_subsystem_id == PCI_SUBSYSTEM[key]
    assert _cls(b, "pci_subsystem_id") == ("measured" if PCI_SUBSYSTEM[key] else "unknown")


# NVIDIA/mig-parted deployments/systemd/config-default.yaml (B300 in commit 47c56d9, GB300 in 7544911): the profiles
# of each Blackwell Ultra board with the count its all-<profile> config creates, and its all-balanced config.
MIG_PARTED_ULTRA = {
    B300: {"1g.34gb": 7, "1g.34gb+me": 1, "1g.67gb": 4, "2g.67gb": 3, "3g.135gb": 2, "4g.135gb": 1, "7g.269gb": 1},
    GB300: {"1g.35gb": 7, "1g.35gb+me": 1, "1g.70gb": 4, "2g.70gb": 3, "3g.139gb": 2, "4g.139gb": 1, "7g.278gb": 1},
}
MIG_PARTED_ULTRA_BALANCED = {B300: {"1g.34gb": 2, "2g.67gb": 1, "3g.135gb": 1}, GB300: {"1g.35gb": 2, "2g.70gb": 1, "3g.139gb": 1}}
# NVIDIA's "MIG on DGX Station" playbook: `nvidia-smi mig -lgip` ids on the Blackwell Ultra GPU of a GB300.
GB300_PLAYBOOK_IDS = {"1g.35gb": 19, "1g.35gb+me": 20, "1g.70gb": 15, "2g.70gb": 14, "3g.139gb": 9, "4g.139gb": 5, "7g.278gb": 0}
# Each Blackwell Ultra board and the Blackwell board whose MIG rows it takes (same SMs, same geometry, 1.5x the memory).
ULTRA_RELATIVE = {B300: B200, GB300: GB200}


@pytest.mark.parametrize("key", list(MIG_PARTED_ULTRA))
def test_blackwell_ultra_profiles_are_mig_parted_s(key: str) -> None:
    b = get_board(key)
    assert {p.name: p.max_instances for p in b.gpu_instance_profiles} == MIG_PARTED_ULTRA[key]
    assert {_cls(b, _gi_path(p.name, "max_instances")) for p in b.gpu_instance_profiles} == {"published"}
    assert dict(b.mig_layouts["all-balanced"]) == MIG_PARTED_ULTRA_BALANCED[key]
    for name, count in MIG_PARTED_ULTRA[key].items():
        assert dict(b.mig_layouts[f"all-{name.replace('+', '.')}"]) == {name: count}


def test_gb300_ids_are_the_dgx_station_playbook_s() -> None:
    b = get_board(GB300)
    assert {p.name: p.id for p in b.gpu_instance_profiles} == GB300_PLAYBOOK_IDS
    assert {_cls(b, _gi_path(p.name, "id")) for p in b.gpu_instance_profiles} == {"published"}


@pytest.mark.parametrize("key", list(ULTRA_RELATIVE))
def test_blackwell_ultra_rows_are_their_relative_s_with_1_5x_memory(key: str) -> None:
    """Every fact of a Blackwell Ultra row is the same-shape row of its Blackwell relative but the name and memory;
    rows over 1 or 2 memory slices take 1.5x the relative's memory (the boards' memory ratio), the larger ones the share rule."""
    b, rel = get_board(key), get_board(ULTRA_RELATIVE[key])
    assert round(b.memory_mib / rel.memory_mib, 4) == 1.5
    assert (b.multiprocessors, b.memory_slices, b.compute_slices) == (rel.multiprocessors, rel.memory_slices, rel.compute_slices)
    same = ("nvml_profile", "id", "slice_count", "memory_slices", "multiprocessors", "copy_engines", "decoders", "encoders",
            "jpeg_engines", "ofa_engines", "max_instances", "placements", "p2p_supported")
    rows = {p.nvml_profile: p for p in rel.gpu_instance_profiles}
    for p in b.gpu_instance_profiles:
        model = rows[p.nvml_profile]
        assert tuple(getattr(p, f) for f in same) == tuple(getattr(model, f) for f in same), p.name
        cis = [(c.nvml_profile, c.id, c.slice_count, c.multiprocessors) for c in p.compute_instance_profiles]
        assert cis == [(c.nvml_profile, c.id, c.slice_count, c.multiprocessors) for c in model.compute_instance_profiles], p.name
        if p.memory_slices <= 2:
            assert p.memory_mib == round(model.memory_mib * 1.5 / 128) * 128, p.name
        else:
            assert p.memory_mib == _memory_rule(b.memory_mib, p.memory_slices), p.name
        assert _cls(b, _gi_path(p.name, "memory_mib")) == "derived", p.name


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_whole_gpu_profile_name_is_the_measured_memory_in_gib_rounded_up(key: str) -> None:
    """The published name of the whole-GPU profile (7g.269gb) against the measured board memory (275040 MiB = 268.6 GiB)."""
    b = get_board(key)
    full = _plain(b)[b.compute_slices]
    assert full.name.endswith(f".{-(-b.memory_mib // 1024)}gb"), (full.name, b.memory_mib)


def _mib_of_printed(printed: str) -> int:
    """The rule the Ampere files state: -lgip GiB to the nearest 1/16 GiB (64 MiB)."""
    return round(float(printed) * 16) * 64


@pytest.mark.parametrize("key", list(AMPERE_LGIP))
def test_ampere_rows_are_the_real_lgip(key: str) -> None:
    b = get_board(key)
    for name, row in AMPERE_LGIP[key].items():
        p = b.profile(name)
        got = tuple(getattr(p, f) for f in LGIP_FIELDS)
        assert got == (row[0], _mib_of_printed(row[1]), *row[2:]), name
        assert _cls(b, _gi_path(name, "multiprocessors")) == "measured", name
        assert _cls(b, _gi_path(name, "memory_mib")) == "derived", name
    assert dict(b.mig_layouts["all-balanced"]) == AMPERE_BALANCED[key]


def test_a100_80gb_1g_20gb_is_the_40gb_1g_10gb_row_with_double_memory() -> None:
    """The one derived row: the A100 40GB's real 1g.10gb (ID 15) over this board's 2-memory-slice memory."""
    big, small = get_board("a100-80gb"), get_board("a100-40gb")
    p, model = big.profile("1g.20gb"), small.profile("1g.10gb")
    same = ("id", "nvml_profile", "slice_count", "memory_slices", "multiprocessors", "decoders", "encoders", "copy_engines",
            "jpeg_engines", "ofa_engines", "max_instances", "placements")
    assert tuple(getattr(p, f) for f in same) == tuple(getattr(model, f) for f in same)
    assert p.memory_mib == big.profile("2g.20gb").memory_mib
    assert _cls(big, _gi_path("1g.20gb", "multiprocessors")) == "derived"


def test_a30_placements_are_every_aligned_start_of_four_slices() -> None:
    b = get_board("a30-24gb")
    for p in b.gpu_instance_profiles:
        assert p.placements == tuple(range(0, b.memory_slices, p.memory_slices)), p.name
        assert _cls(b, _gi_path(p.name, "placements")) == "derived", p.name


@pytest.mark.parametrize("key", ("a100-40gb", "a100-80gb"))
def test_a100_placements_are_those_of_h100(key: str) -> None:
    h100 = {p.id: (p.memory_slices, p.placements) for p in get_board("h100-80gb").gpu_instance_profiles}
    for p in get_board(key).gpu_instance_profiles:
        assert (p.memory_slices, p.placements) == h100[p.id], p.name


# --------------------------------------------------------------------------- #
# Derived facts recomputed from their rule
# --------------------------------------------------------------------------- #


@pytest.mark.parametrize("key", HOPPER)
def test_memory_share_rule_reproduces_the_real_hopper_rows(key: str) -> None:
    b = get_board(key)
    for slices, printed in HOPPER_BIG_ROWS_GIB[key].items():
        assert _memory_rule(b.memory_mib, slices) == _gib_to_mib(printed), (key, slices)


@pytest.mark.parametrize("key", BLACKWELL)
def test_blackwell_big_rows_are_derived_by_their_rules(key: str) -> None:
    b = get_board(key)
    plain = _plain(b)
    four = 2 * plain[2].multiprocessors
    expected_sms = {7: b.multiprocessors, 4: four, 3: _nearest_even(four * 60 / 64)}
    for slices, sms in expected_sms.items():
        p = plain[slices]
        assert p.memory_mib == _memory_rule(b.memory_mib, p.memory_slices), p.name
        assert p.multiprocessors == sms, p.name
        assert p.decoders == p.jpeg_engines == slices, p.name
        for fact in ("memory_mib", "multiprocessors", "decoders", "jpeg_engines"):
            assert _cls(b, _gi_path(p.name, fact)) == "derived", (p.name, fact)
    assert expected_sms[3] + expected_sms[4] <= b.multiprocessors


@pytest.mark.parametrize("key", (*HOPPER, *BLACKWELL))
def test_media_engines_are_one_per_compute_slice_on_every_row(key: str) -> None:
    """The rule the derived Blackwell DEC/JPEG counts use holds on every measured Hopper and Blackwell row (not on Ampere's)."""
    for p in get_board(key).gpu_instance_profiles:
        assert p.decoders == p.jpeg_engines == p.slice_count, p.name


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_whole_gpu_engines_are_the_7g_row(key: str) -> None:
    b = get_board(key)
    full = _plain(b)[b.compute_slices]
    for fact in ("copy_engines", "decoders", "encoders", "jpeg_engines", "ofa_engines"):
        assert getattr(b, fact) == getattr(full, fact), fact
        assert _cls(b, fact) in ("derived", "published"), fact


@pytest.mark.parametrize("key", MIG_BOARDS)
def test_partial_compute_instances_have_the_sms_of_the_same_size_gpu_instance(key: str) -> None:
    b = get_board(key)
    plain = _plain(b)
    for gi in b.gpu_instance_profiles:
        for ci in gi.compute_instance_profiles:
            if ci.slice_count < gi.slice_count:
                assert ci.multiprocessors == plain[ci.slice_count].multiprocessors, ci.name


@pytest.mark.parametrize("key", (*HOPPER, *BLACKWELL))
def test_double_memory_1g_offers_a_1g_and_its_own_compute_instance(key: str) -> None:
    """1g.20gb and its kin: the default CI (ID 7) with the GI's SMs, and the plain 1-slice CI (ID 0) with the 1g's SMs."""
    b = get_board(key)
    gi = next(p for p in b.gpu_instance_profiles if p.nvml_profile == 9)  # NVML_GPU_INSTANCE_PROFILE_1_SLICE_REV2
    cis = {c.id: (c.nvml_profile, c.name, c.multiprocessors) for c in gi.compute_instance_profiles}
    assert cis == {7: (7, gi.name, gi.multiprocessors), 0: (0, gi.name, _plain(b)[1].multiprocessors)}
    assert gi.multiprocessors > _plain(b)[1].multiprocessors
    assert b.provenance(f"gpu_instance_profiles.{gi.name}.compute_instance_profiles.{gi.name}@0.multiprocessors")[0] == "derived"


@pytest.mark.parametrize("key", BLACKWELL)
def test_placements_are_those_of_h100(key: str) -> None:
    h100 = {p.nvml_profile: (p.memory_slices, p.placements) for p in get_board("h100-80gb").gpu_instance_profiles}
    b = get_board(key)
    for p in b.gpu_instance_profiles:
        assert (p.memory_slices, p.placements) == h100[p.nvml_profile], p.name
        assert _cls(b, _gi_path(p.name, "placements")) == "derived", p.name


@pytest.mark.parametrize("key", BLACKWELL)
def test_static_layouts_with_the_big_profiles_fit(key: str) -> None:
    b = get_board(key)
    big = [name for name, layout in b.mig_layouts.items() if any(n.startswith(("3g", "4g", "7g")) for n in layout)]
    assert len(big) == 4  # all-balanced, all-3g, all-4g, all-7g
    assert all(layout_fits(b.gpu_instance_profiles, b.mig_layouts[name], b.memory_slices) for name in big)


def test_readme_tables_are_the_catalog_s() -> None:
    from pathlib import Path

    from fake_gpus.catalog import all_boards
    from fake_gpus.catalog.provenance import markdown_section

    readme = (Path(__file__).resolve().parents[2] / "docs" / "reference" / "boards.md").read_text()
    begin = readme.index("-->\n", readme.index("<!-- provenance tables")) + 4
    end = readme.index("\n<!-- end of provenance tables -->")
    assert readme[begin:end] == markdown_section(all_boards()), "README provenance tables are stale; paste markdown_section(all_boards())"


@pytest.mark.parametrize("key", BLACKWELL)
def test_readme_table_marks_the_big_rows(key: str) -> None:
    from fake_gpus.catalog.provenance import markdown_table

    rows = {line.split(" | ")[0].strip("| "): line.split(" | ")[1:] for line in markdown_table(get_board(key)).splitlines()[2:]}
    big = _plain(get_board(key))[3].name
    memory, sms, ce = rows[big][0], rows[big][1], rows[big][2]
    assert (memory, sms, ce) == ("D", "D", "P" if key == B200 else "D")
