"""The fake-nvml CLI (through a throwaway argparse) and fake-nvidia-smi."""

from __future__ import annotations

import argparse
import subprocess
import sys

import pytest

from fake_gpus.nvml import state
from fake_gpus.nvml.cli import register
from nvml_helpers import mig_board_keys


def run_cli(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="dra-testbed")
    register(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    return args.func(args)


def test_env_creates_state_and_prints_exports(tmp_path, capsys, nvml_lib_dir):
    key = mig_board_keys()[0]
    d = tmp_path / "node"
    assert run_cli(["fake-nvml", "env", "--gpus", f"{key}:2", "--gpus", f"{key}:1", "--state-dir", str(d)]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].startswith(f"export LD_LIBRARY_PATH={nvml_lib_dir}")
    assert out[1] == f"export FAKE_NVML_STATE_DIR={d}"
    gpus, _ = state.validate_state_dir(d)
    assert [g.board for g in gpus] == [key] * 3
    # The exports work in a shell: any NVML client then sees the boards.
    script = "\n".join(out) + f"\n{sys.executable} -c 'import pynvml; pynvml.nvmlInit(); print(pynvml.nvmlDeviceGetCount())'"
    assert subprocess.run(["bash", "-c", script], capture_output=True, text=True).stdout.strip() == "3"


@pytest.mark.parametrize(
    "spec,needle",
    [("no-such-board:2", "valid boards"), ("BOARD:0", "at least 1"), ("BOARD", "BOARD:COUNT"), ("BOARD:x", "BOARD:COUNT")],
)
def test_env_rejects_bad_input(tmp_path, capsys, spec, needle):
    d = tmp_path / "node"
    spec = spec.replace("BOARD", mig_board_keys()[0])
    assert run_cli(["fake-nvml", "env", "--gpus", f"{mig_board_keys()[0]}:1", "--gpus", spec, "--state-dir", str(d)]) == 2
    err = capsys.readouterr().err
    assert needle in err and len(err.strip().splitlines()) == 1
    assert not d.exists()  # nothing created


def test_reset_and_build(tmp_path, capsys, nvml_lib_dir):
    key = mig_board_keys()[0]
    d = tmp_path / "node"
    state.create_state_dir(d, [(key, 1)])
    state.write_mig_state(d, state.MigState(modes={0: (1, 1)}))
    assert run_cli(["fake-nvml", "reset", "--state-dir", str(d)]) == 0
    assert state.validate_state_dir(d)[1].modes == {0: (0, 0)}
    assert run_cli(["fake-nvml", "reset", "--state-dir", str(tmp_path / "missing")]) == 2
    capsys.readouterr()
    assert run_cli(["fake-nvml", "build"]) == 0
    assert capsys.readouterr().out.strip() == str(nvml_lib_dir)


def test_fake_nvidia_smi(run_client, tmp_path):
    key = mig_board_keys()[0]
    d = tmp_path / "node"
    gpus = state.create_state_dir(d, [(key, 2)])
    run_client("""
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceSetMigMode(h, 1)
gi = pynvml.nvmlDeviceCreateGpuInstance(h, 0)
pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 0)
""", d)
    smi = "import sys; from fake_gpus.nvml.smi import main; sys.exit(main(sys.argv[1:]))"
    listing = run_client(f"{smi}\n", d, {}).stdout  # no args: the device table
    assert gpus[0].bus_id in listing and "Enabled" in listing and "Disabled" in listing
    out = run_client("import sys; sys.argv[1:] = ['-L']\n" + smi, d).stdout
    assert "GPU 0: " in out and gpus[1].uuid in out and "MIG 1c.7g" in out and "(UUID: MIG-" in out
    out = run_client("import sys; sys.argv[1:] = ['mig', '-lgipp']\n" + smi, d).stdout
    assert "Placements: {0}:8" in out
    out = run_client("import sys; sys.argv[1:] = ['mig', '-lgi']\n" + smi, d).stdout
    assert "0:8" in out
    out = run_client("import sys; sys.argv[1:] = ['mig', '-lci']\n" + smi, d).stdout
    assert "0:1" in out
    out = run_client("import sys; sys.argv[1:] = ['mig', '-lgip']\n" + smi, d).stdout
    assert "0/1" in out  # the whole-GPU instance is taken
