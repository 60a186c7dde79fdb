"""Every mode a board has, and only those: whole GPUs on every board, static MIG layouts and dynamic MIG on the
boards with MIG; a MIG mode on a board without it (T4, L4, L40S) is refused in one line naming the board, at
parse time (a layout file or a --node flag) and as `dra-testbed up` input (exit 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from fake_gpus.catalog import BOARD_KEYS, get_board
from fake_gpus.machine.provision import usable_layouts
from fake_gpus.node import Mode, ModeError, check_mode_for_board
from testbed.clusters.layout import LayoutError, check_layout, load_layout, parse_node_flag

REPO = Path(__file__).resolve().parents[2]
WITHOUT_MIG = [k for k in BOARD_KEYS if not get_board(k).mig_capable]
WITH_MIG = [k for k in BOARD_KEYS if get_board(k).mig_capable]


def test_the_boards_without_mig_are_the_ones_nvidia_lists_none_for() -> None:
    assert WITHOUT_MIG == ["l4-24gb", "l40s-48gb", "t4-16gb"]


@pytest.mark.parametrize("key", BOARD_KEYS)
def test_whole_works_on_every_board(key: str) -> None:
    spec = parse_node_flag(f"n={key}:1:whole")
    assert spec.mode == Mode("whole")


@pytest.mark.parametrize("key", WITH_MIG)
def test_every_mig_mode_of_a_mig_board_is_accepted(key: str) -> None:
    from testbed.clusters.layout import Layout

    specs = [parse_node_flag(f"n={key}:1:dynamic-mig")]
    specs += [parse_node_flag(f"n={key}:1:static-mig:{name}") for name in usable_layouts(get_board(key))]
    assert len(specs) > 1
    check_layout(Layout(tuple(specs)))


@pytest.mark.parametrize("key", WITHOUT_MIG)
@pytest.mark.parametrize("mode", ["dynamic-mig", "static-mig:all-balanced"])
def test_a_mig_mode_on_a_board_without_mig_is_refused_naming_the_board(key: str, mode: str) -> None:
    with pytest.raises(LayoutError) as err:
        parse_node_flag(f"n={key}:1:{mode}")
    kind = mode.split(":")[0]
    assert str(err.value) == (f"--node n={key}:1:{mode}: mode {kind} needs MIG, which board {key} does not have; "
                              f"valid mode for {key}: whole")


def test_a_layout_file_with_a_mig_mode_on_a_board_without_mig_is_refused(tmp_path: Path) -> None:
    file = tmp_path / "fleet.yaml"
    file.write_text("nodes:\n  - {name: t4, board: t4-16gb, count: 4, mode: dynamic-mig}\n")
    with pytest.raises(LayoutError, match=r"node 1: mode dynamic-mig needs MIG, which board t4-16gb does not have; valid mode for t4-16gb: whole$"):
        load_layout(file)


def test_the_node_contract_refuses_it_without_reading_the_catalog() -> None:
    check_mode_for_board(Mode("dynamic-mig"), "x", True)
    check_mode_for_board(Mode("whole"), "x", False)
    with pytest.raises(ModeError, match="board x does not have"):
        check_mode_for_board(Mode("static-mig", "all-balanced"), "x", False)


def test_up_refuses_it_with_exit_2_before_anything_starts() -> None:
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "up", "--node", "n=t4-16gb:4:dynamic-mig"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip().splitlines()[-1].endswith("mode dynamic-mig needs MIG, which board t4-16gb does not have; valid mode for t4-16gb: whole")


@pytest.mark.parametrize("name", ["fleet-a100", "fleet-h100", "fleet-b200", "fleet-b300", "fleet-mixed-generations"])
def test_generation_layouts_load_and_can_be_provisioned(name: str) -> None:
    layout = load_layout(REPO / "clusters" / "layouts" / f"{name}.yaml")
    check_layout(layout)
    assert {n.board for n in layout.nodes}
