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
    [("no-such-board:2", "valid boards"), ("BOARD:0", "1 to 64"), ("BOARD", "BOARD:COUNT"), ("BOARD:x", "BOARD:COUNT"),
     ("BOARD:99999999999999999999", "1 to 64"),  # checked before any GPU is made (it once looped for ever)
     ("BOARD:64", "1 to 64")],  # 65 with the first --gpus
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


def test_fake_nvidia_smi_provenance(run_client, tmp_path):
    """--provenance names each board of the node once, with every fact's class and source, through NVML's PCI id."""
    d = tmp_path / "node"
    state.create_state_dir(d, [("b200-180gb", 2), ("h100-80gb", 1)])
    smi = "import sys; from fake_gpus.nvml.smi import main; sys.exit(main(sys.argv[1:]))"
    out = run_client("import sys; sys.argv[1:] = ['--provenance']\n" + smi, d).stdout.splitlines()
    heads = [line for line in out if line.startswith("GPU ")]
    assert heads == ["GPU 0,1: NVIDIA B200 (b200-180gb): where each fact comes from",
                     "GPU 2: NVIDIA H100 80GB HBM3 (h100-80gb): where each fact comes from"]
    rows = [line.split() for line in out if line.startswith("  ") and line.split()[0] == "3g.90gb"]
    assert ["3g.90gb", "derived", "memory_mib=90880"] in rows
    assert any(r[:2] == ["3g.90gb", "published"] and "copy_engines=6" in r and "max_instances=2" in r for r in rows)
    derived = run_client("import sys; sys.argv[1:] = ['--provenance', 'derived']\n" + smi, d).stdout.splitlines()
    classes = {line.split()[1] for line in derived if line.startswith("  ") and not line.startswith("   ")}
    assert classes == {"derived"}
    bad = run_client("import sys; sys.argv[1:] = ['--provenance', 'guessed']\n" + smi, d, check=False)
    assert bad.returncode == 2 and "invalid choice: 'guessed'" in bad.stderr
