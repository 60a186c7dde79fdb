"""Foreign, corrupt and missing state directories give clear errors; visible devices narrow the view."""

from __future__ import annotations

import re

import pynvml
import pytest

from fake_gpus.nvml import state
from nvml_helpers import VIEW, json_lines, mig_board_keys, nvml_code

INIT = """
import pynvml
try:
    pynvml.nvmlInit()
except pynvml.NVMLError as e:
    print(e.value)
else:
    print(0)
"""


def _corrupt(d, name, text):
    (d / name).write_text(text)


@pytest.mark.parametrize(
    "name,text,code,problem",
    [
        ("gpus", "hello world\n", pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "bad header"),
        ("gpus", "fake-nvml-gpus 7\n", pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "version"),
        ("gpus", "fake-nvml-gpus 1\ngpu 0 h100-80gb 0 nonsense\n", pynvml.NVML_ERROR_UNKNOWN, "malformed"),
        ("gpus", "fake-nvml-gpus 1\ngpu 0 no-such-board 0 GPU-12345678-1234-1234-1234-123456789abc 1 00000000:18:00.0\n",
         pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "board"),
        ("mig", "fake-nvml-mig 1\nmode 0 0 0\ngi 0 7 424242 0 1\n", pynvml.NVML_ERROR_UNKNOWN, "profile"),
        ("mig", "fake-nvml-mig 1\nmode 0 1 1\nci 0 3 0 0 0 1 MIG-12345678-1234-1234-1234-123456789abc\n", pynvml.NVML_ERROR_UNKNOWN, "GPU instance"),
        ("mig", "garbage", pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "header"),
    ],
)
def test_corrupt_or_foreign_state_dir(run_client, tmp_path, name, text, code, problem):
    d = tmp_path / "node"
    state.create_state_dir(d, [(mig_board_keys()[0], 1)])
    _corrupt(d, name, text)
    proc = run_client(INIT, d)
    assert int(proc.stdout) == code
    # The library says which file is wrong, in one line; so does the Python side.
    assert str(d / name) in proc.stderr and len(proc.stderr.strip().splitlines()) == 1
    with pytest.raises(state.StateError) as e:
        state.validate_state_dir(d)
    assert str(d / name) in str(e.value) and "\n" not in str(e.value)


def test_missing_or_unset_state_dir(run_client, tmp_path):
    assert int(run_client(INIT, None).stdout) == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    assert int(run_client(INIT, tmp_path / "nowhere").stdout) == pynvml.NVML_ERROR_DRIVER_NOT_LOADED
    (tmp_path / "foreign").mkdir()
    (tmp_path / "foreign" / "notes.txt").write_text("not ours")
    proc = run_client(INIT, tmp_path / "foreign")
    assert int(proc.stdout) == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    with pytest.raises(state.StateError, match="not a fake-nvml state directory"):
        state.validate_state_dir(tmp_path / "foreign")
    with pytest.raises(state.StateError, match="not a fake-nvml state directory"):
        state.create_state_dir(tmp_path / "foreign", [(mig_board_keys()[0], 1)])


def test_failed_init_leaves_library_uninitialized(nvml_lib, tmp_path):
    d = tmp_path / "bad"
    d.mkdir()
    assert nvml_lib.fakeNvmlSetStateDir(str(d).encode()) == 0
    with pytest.raises(pynvml.NVMLError) as e:
        pynvml.nvmlInit()
    assert nvml_code(e) == pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH
    assert nvml_lib.fakeNvmlSetStateDir(None) == 0  # refcount still 0


def test_create_state_dir_rules(tmp_path):
    key = mig_board_keys()[0]
    gpus = state.create_state_dir(tmp_path / "n", [(key, 2)])
    assert state.create_state_dir(tmp_path / "n", [(key, 2)]) == gpus  # idempotent
    with pytest.raises(state.StateError, match="already holds"):
        state.create_state_dir(tmp_path / "n", [(key, 3)])
    with pytest.raises(state.StateError, match="valid boards"):
        state.create_state_dir(tmp_path / "m", [("no-such-board", 1)])
    assert len({g.uuid for g in gpus}) == 2 and len({g.bus_id for g in gpus}) == 2


@pytest.mark.parametrize(
    "env,want",
    [
        ({}, [0, 1, 2]),
        ({"NVIDIA_VISIBLE_DEVICES": "all"}, [0, 1, 2]),
        ({"NVIDIA_VISIBLE_DEVICES": "none"}, []),
        ({"NVIDIA_VISIBLE_DEVICES": "void"}, []),
        ({"NVIDIA_VISIBLE_DEVICES": "2,0"}, [2, 0]),
        ({"NVIDIA_VISIBLE_DEVICES": "GPU1"}, [1]),
        ({"CUDA_VISIBLE_DEVICES": "1"}, [1]),
        ({"CUDA_VISIBLE_DEVICES": ""}, []),
        ({"NVIDIA_VISIBLE_DEVICES": "1,2", "CUDA_VISIBLE_DEVICES": "1"}, [2]),  # CUDA indexes the narrowed view
        # the fake driver's per-device variables (one per CDI device, so several claims add up):
        # their union in device order; the shared NVIDIA_VISIBLE_DEVICES (last claim wins) is then ignored
        ({"FAKE_NVML_VISIBLE_A": "GPU2", "FAKE_NVML_VISIBLE_B": "GPU0"}, [0, 2]),
        ({"FAKE_NVML_VISIBLE_A": "GPU2", "FAKE_NVML_VISIBLE_B": "GPU2,GPU0", "NVIDIA_VISIBLE_DEVICES": "GPU1"}, [0, 2]),
        ({"FAKE_NVML_VISIBLE_A": "GPU2", "FAKE_NVML_VISIBLE_B": "GPU1", "CUDA_VISIBLE_DEVICES": "1"}, [2]),
        ({"FAKE_NVML_VISIBLE_A": "none"}, []),
    ],
)
def test_visible_devices_narrow_the_view(run_client, three_gpu_node, env, want):
    d, gpus, uuids = three_gpu_node
    env = {k: re.sub(r"GPU(\d)", lambda m: gpus[int(m.group(1))].uuid, v) for k, v in env.items()}
    rows = json_lines(run_client(VIEW, d, env))
    assert [r[0] for r in rows] == [gpus[i].uuid for i in want]
    assert [r[1] for r in rows] == [gpus[i].minor for i in want]  # minors stay the host's
    for r, i in zip(rows, want):
        assert r[2] == (uuids if i == 1 else [])


def test_visible_mig_device(run_client, three_gpu_node):
    d, gpus, uuids = three_gpu_node
    rows = json_lines(run_client(VIEW, d, {"NVIDIA_VISIBLE_DEVICES": uuids[1]}))
    assert rows == [[gpus[1].uuid, gpus[1].minor, [uuids[1]]]]
    rows = json_lines(run_client(VIEW, d, {"NVIDIA_VISIBLE_DEVICES": f"{uuids[0]},{gpus[2].uuid}"}))
    assert rows == [[gpus[1].uuid, gpus[1].minor, [uuids[0]]], [gpus[2].uuid, gpus[2].minor, []]]
    rows = json_lines(run_client(VIEW, d, {"FAKE_NVML_VISIBLE_X": gpus[2].uuid, "FAKE_NVML_VISIBLE_Y": uuids[1]}))
    assert rows == [[gpus[1].uuid, gpus[1].minor, [uuids[1]]], [gpus[2].uuid, gpus[2].minor, []]]
    # two MIG devices of one GPU: that GPU once, with both (however they were named); its whole GPU shows all
    both = [[gpus[1].uuid, gpus[1].minor, uuids]]
    assert json_lines(run_client(VIEW, d, {"NVIDIA_VISIBLE_DEVICES": f"{uuids[1]},{uuids[0]}"})) == both
    assert json_lines(run_client(VIEW, d, {"FAKE_NVML_VISIBLE_X": uuids[1], "FAKE_NVML_VISIBLE_Y": uuids[0]})) == both
    assert json_lines(run_client(VIEW, d, {"NVIDIA_VISIBLE_DEVICES": f"{uuids[0]},{gpus[1].uuid}"})) == both
    proc = run_client(f"""
import pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByUUID("{uuids[1]}")
print(pynvml.nvmlDeviceIsMigDeviceHandle(h).value)
try:
    pynvml.nvmlDeviceGetHandleByUUID("{uuids[0]}")
except pynvml.NVMLError_NotFound:
    print("hidden")
""", d, {"NVIDIA_VISIBLE_DEVICES": uuids[1]})
    assert proc.stdout.split() == ["1", "hidden"]
