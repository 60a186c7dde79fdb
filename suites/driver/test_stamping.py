"""Slices stamped from templates are byte for byte what build_slices builds for each node."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fake_gpus.catalog import all_boards, get_board
from fake_gpus.driver import miglayout
from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
from fake_gpus.driver.slices import api_limits, build_slices
from fake_gpus.driver.stamping import Stamper
from fake_gpus.machine.provision import usable_layouts
from fake_gpus.node import parse_mode
from fake_gpus.nvml import state
from fake_gpus.nvml.build import SONAME, ensure_library

IDENTITY = DriverIdentity()


@pytest.fixture(scope="module")
def nvml() -> NvmlLibrary:
    return NvmlLibrary(ensure_library() / SONAME)


def make_nodes(root: Path, nvml: NvmlLibrary, board: str, count: int, layout: dict | None, n: int = 3):
    """`n` nodes of one shape, each with its own identities, MIG `layout` applied through NVML."""
    nodes = []
    for i in range(n):
        path = root / f"{board}-{i}"
        state.create_state_dir(path, [(board, count)])
        if layout:
            with nvml.session(path):
                miglayout.apply_layout(layout)
        nodes.append((f"node-{board}-{i}", inventory(nvml, path)))
    return nodes


def expected(node: str, inv, mode, limits, faults, uid) -> list[str]:
    return [json.dumps(b, separators=(",", ":")) for b in build_slices(node, inv, mode, limits, IDENTITY, faults, 7, uid)]


CASES = [(b.key, "whole") for b in all_boards()] + [(b.key, "dynamic-mig") for b in all_boards()] + [
    (b.key, f"static-mig:{next(iter(usable_layouts(b)))}") for b in all_boards() if usable_layouts(b)]


@pytest.mark.parametrize(("board", "mode_text"), CASES)
@pytest.mark.parametrize("minor", ["1.34", "1.35"])
def test_stamped_slices_equal_built_ones(tmp_path: Path, nvml: NvmlLibrary, board: str, mode_text: str, minor: str) -> None:
    mode = parse_mode(mode_text)
    layout = usable_layouts(get_board(board))[mode.mig_layout] if mode.mig_layout else None
    nodes = make_nodes(tmp_path, nvml, board, 8, layout)
    limits = api_limits(minor)
    stamper = Stamper(IDENTITY, limits)
    for i, (name, inv) in enumerate(nodes):
        uid = None if i == 2 else f"uid-{i}"
        stamped = stamper.stamp(name, uid, inv, mode)
        assert [s.body(7).decode() for s in stamped] == expected(name, inv, mode, limits, frozenset(), uid)
    (a, inv_a), (b, inv_b) = nodes[:2]
    assert not {s.digest for s in stamper.stamp(a, "u", inv_a, mode)} & {s.digest for s in stamper.stamp(b, "u", inv_b, mode)}
    assert len(stamper.templates) == 2  # one shape, with and without an owner reference


def test_templates_follow_what_nvml_reports_and_faults(tmp_path: Path, nvml: NvmlLibrary) -> None:
    plain = make_nodes(tmp_path / "a", nvml, "h100-80gb", 4, None, n=1)
    laid_out = make_nodes(tmp_path / "b", nvml, "h100-80gb", 4, {"1g.10gb": 7}, n=1)
    limits = api_limits("1.34")
    stamper = Stamper(IDENTITY, limits)
    mode = parse_mode("static-mig:all-1g.10gb")
    for name, inv in plain + laid_out:  # same labels, different NVML state: different slices
        assert [s.body(7).decode() for s in stamper.stamp(name, "u", inv, mode)] == expected(name, inv, mode, limits, frozenset(), "u")
    assert len(stamper.templates) == 2
    faulty = Stamper(IDENTITY, limits, frozenset({"wrong-memory"}))
    name, inv = plain[0]
    whole = parse_mode("whole")
    assert [s.body(7).decode() for s in faulty.stamp(name, "u", inv, whole)] == expected(name, inv, whole, limits, frozenset({"wrong-memory"}), "u")
