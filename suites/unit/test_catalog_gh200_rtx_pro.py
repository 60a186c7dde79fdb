"""The GH200 96GB and RTX PRO 6000 board files against the public captures they cite, and their derived rows recomputed.

RTX PRO 6000: a real `nvidia-smi mig -lgip` and `-lgipp` (12 memory slices, 4 compute slices); GH200 480GB: a real
`nvidia-smi` MIG-devices table (three rows), every other row the H100 NVL's of the same shape by the rule its file states.
"""

from __future__ import annotations

import pytest

from fake_gpus.catalog import Board, get_board

GH200, RTX, NVL = "gh200-96gb", "rtx-pro-6000-96gb", "h100-nvl-94gb"

# Real `nvidia-smi mig -i 0 -lgip` on NVIDIA RTX PRO 6000 Blackwell Server Edition (a public walkthrough; the same rows in
# bottlerocket-kernel-kit PR 300 and GKE's container-engine-accelerators PR 564):
# name: (id, GiB as printed, SM, DEC, ENC, CE, JPEG, OFA, instances)
RTX_LGIP = {
    "1g.24gb": (14, "23.62", 46, 1, 1, 1, 1, 0, 4), "1g.24gb+me": (21, "23.62", 46, 1, 1, 1, 1, 1, 1),
    "1g.24gb+gfx": (47, "23.62", 46, 1, 1, 1, 1, 0, 4), "1g.24gb+me.all": (65, "23.62", 46, 4, 4, 1, 4, 1, 1),
    "1g.24gb-me": (67, "23.62", 46, 0, 0, 1, 0, 0, 4), "2g.48gb": (5, "47.38", 94, 2, 2, 2, 2, 0, 2),
    "2g.48gb+gfx": (35, "47.38", 94, 2, 2, 2, 2, 0, 2), "2g.48gb+me.all": (64, "47.38", 94, 4, 4, 2, 4, 1, 1),
    "2g.48gb-me": (66, "47.38", 94, 0, 0, 2, 0, 0, 2), "4g.96gb": (0, "95.12", 188, 4, 4, 4, 4, 1, 1),
    "4g.96gb+gfx": (32, "95.12", 188, 4, 4, 4, 4, 1, 1),
}
LGIP_FIELDS = ("id", "memory_mib", "multiprocessors", "decoders", "encoders", "copy_engines", "jpeg_engines", "ofa_engines", "max_instances")
# The same walkthrough's `nvidia-smi mig -i 0 -lgipp`: profile id -> (starts, size).
RTX_LGIPP = {**{i: ((0, 3, 6, 9), 3) for i in (14, 21, 47, 65, 67)}, **{i: ((0, 6), 6) for i in (5, 35, 64, 66)}, 0: ((0,), 12), 32: ((0,), 12)}
# nvml.h (go-nvml v0.13.3-1): the enum each suffix is (go-nvlib names 1_SLICE_GFX '+gfx', *_ALL_ME '+me.all', *_NO_ME '-me').
RTX_ENUMS = {"1g.24gb": 0, "1g.24gb+me": 7, "1g.24gb+gfx": 10, "1g.24gb+me.all": 15, "1g.24gb-me": 13,
             "2g.48gb": 1, "2g.48gb+gfx": 11, "2g.48gb+me.all": 16, "2g.48gb-me": 14, "4g.96gb": 3, "4g.96gb+gfx": 12}
# NVIDIA/mig-parted config-default.yaml: all-balanced for 0x2BB510DE and 0x234210DE.
BALANCED = {RTX: {"1g.24gb": 2, "2g.48gb": 1}, GH200: {"1g.12gb": 2, "2g.24gb": 1, "3g.48gb": 1}}
# ... and the counts its all-<profile> configs create on a GH200 ('H100 NVL, H800 NVL, GH200' and 'H100-96GB, PG506-96GB, GH200').
GH200_MIG_PARTED = {"1g.12gb": 7, "1g.12gb+me": 1, "1g.24gb": 4, "2g.24gb": 3, "3g.48gb": 2, "4g.48gb": 1, "7g.96gb": 1}
# Real `nvidia-smi` MIG-devices table on NVIDIA GH200 480GB (sgawe11/RAG-on-GH200-with-MIG): name: (GI id, total MiB, SM, CE, DEC, JPG)
GH200_DEVICES = {"3g.48gb": (1, 47616, 60, 3, 3, 3), "2g.24gb": (5, 23552, 32, 2, 2, 2), "1g.24gb": (6, 23552, 26, 1, 1, 1)}


def _cls(b: Board, path: str) -> str:
    return b.provenance(path)[0]


def _gi(name: str, fact: str) -> str:
    return f"gpu_instance_profiles.{name}.{fact}"


def test_rtx_pro_rows_are_the_real_lgip() -> None:
    b = get_board(RTX)
    assert [p.name for p in b.gpu_instance_profiles] == list(RTX_LGIP)
    for name, row in RTX_LGIP.items():
        p = b.profile(name)
        # the file's rule: the printed GiB read to the nearest 1/16 GiB (torch shows 24192 MiB on a real 1g.24gb)
        assert tuple(getattr(p, f) for f in LGIP_FIELDS) == (row[0], round(float(row[1]) * 16) * 64, *row[2:]), name
        assert p.nvml_profile == RTX_ENUMS[name], name
        assert _cls(b, _gi(name, "multiprocessors")) == "measured", name
        assert _cls(b, _gi(name, "memory_mib")) == "derived", name
    assert b.profile("1g.24gb").memory_mib == 24192


def test_rtx_pro_placements_are_the_real_lgipp() -> None:
    b = get_board(RTX)
    assert (b.memory_slices, b.compute_slices, b.multiprocessors) == (12, 4, 188)
    for p in b.gpu_instance_profiles:
        assert (p.placements, p.memory_slices) == RTX_LGIPP[p.id], p.name
        assert _cls(b, _gi(p.name, "placements")) == "measured", p.name
    assert _cls(b, "memory_slices") == "measured"


@pytest.mark.parametrize("key", (RTX, GH200))
def test_balanced_layout_is_mig_parted_s(key: str) -> None:
    b = get_board(key)
    assert dict(b.mig_layouts["all-balanced"]) == BALANCED[key]
    for p in b.gpu_instance_profiles:
        assert dict(b.mig_layouts[f"all-{p.name.replace('+', '.')}"]) == {p.name: p.max_instances}, p.name


def test_gh200_names_and_counts_are_mig_parted_s() -> None:
    b = get_board(GH200)
    assert {p.name: p.max_instances for p in b.gpu_instance_profiles} == GH200_MIG_PARTED
    assert {_cls(b, _gi(p.name, "max_instances")) for p in b.gpu_instance_profiles} == {"published"}


def test_gh200_rows_the_capture_shows_are_measured() -> None:
    b = get_board(GH200)
    for name, (_gi_id, mib, sm, ce, dec, jpg) in GH200_DEVICES.items():
        p = b.profile(name)
        assert (p.memory_mib, p.multiprocessors, p.copy_engines, p.decoders, p.jpeg_engines) == (mib, sm, ce, dec, jpg), name
        assert {_cls(b, _gi(name, f)) for f in ("memory_mib", "multiprocessors", "copy_engines", "decoders", "jpeg_engines")} == {"measured"}


def test_gh200_gi_ids_of_the_capture_are_its_placements_in_the_memory_slice_tree() -> None:
    """GI ids 1 (3g at 0:4), 5 (2g at 4:2), 6 (1g.24gb at 6:2): the placements are the H100 NVL's."""
    b = get_board(GH200)
    for name, (gi_id, *_rest) in GH200_DEVICES.items():
        p = b.profile(name)
        parts = b.memory_slices // p.memory_slices
        assert any(parts - 1 + start // p.memory_slices == gi_id for start in p.placements), name


def test_gh200_other_rows_are_h100_nvl_s_by_the_stated_rule() -> None:
    """Each row is H100 NVL's same-enum row (SMs, engines, counts, placements, CIs); memory the measured rows' rule."""
    b, nvl = get_board(GH200), get_board(NVL)
    assert (b.multiprocessors, b.memory_slices, b.compute_slices) == (nvl.multiprocessors, nvl.memory_slices, nvl.compute_slices)
    rows = {p.nvml_profile: p for p in nvl.gpu_instance_profiles}
    same = ("id", "slice_count", "memory_slices", "multiprocessors", "copy_engines", "decoders", "encoders", "jpeg_engines",
            "ofa_engines", "max_instances", "placements")
    measured = {name: mib for name, (_i, mib, *_r) in GH200_DEVICES.items()}
    for p in b.gpu_instance_profiles:
        model = rows[p.nvml_profile]
        assert tuple(getattr(p, f) for f in same) == tuple(getattr(model, f) for f in same), p.name
        assert [(c.id, c.slice_count, c.multiprocessors) for c in p.compute_instance_profiles] == \
               [(c.id, c.slice_count, c.multiprocessors) for c in model.compute_instance_profiles], p.name
        if p.name in measured:
            continue
        if p.memory_slices == 4:  # 4g shares 3g's memory slices and GiB, as on every Hopper board
            expected = measured["3g.48gb"]
        else:  # scaled by GH200/H100 NVL of the measured row nearest in memory slices
            gh, nv = (measured["1g.24gb"], nvl.profile("1g.24gb").memory_mib) if p.memory_slices == 1 else \
                     (measured["3g.48gb"], nvl.profile("3g.47gb").memory_mib)
            expected = round(model.memory_mib * gh / nv / 128) * 128
        assert p.memory_mib == expected, p.name
        assert _cls(b, _gi(p.name, "memory_mib")) == "derived", p.name


@pytest.mark.parametrize("key", (RTX, GH200))
def test_profile_names_are_go_nvlib_s_from_the_memory(key: str) -> None:
    """go-nvlib names a profile by its memory in eighths of the board rounded up (getMigMemorySizeGB): NVIDIA's driver
    publishes these names, so a row's memory must give the name mig-parted and the captures print."""
    b = get_board(key)
    total_gb = -(-b.memory_mib // 1024)
    for p in b.gpu_instance_profiles:
        eighths = -(-p.memory_mib * 8 // b.memory_mib)
        assert p.name.split(".")[1].split("gb")[0] == str(round(eighths / 8 * total_gb)), p.name
