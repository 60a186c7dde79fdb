"""The stand-in nvidia-cuda-mps-control (fake_gpus/nvml/mps_control.py) driven as NVIDIA's MPS Deployment script
drives the real one: `-d` starts a daemon listed in the node's fake-NVML state for the GPUs of CUDA_VISIBLE_DEVICES,
commands piped to it set what the state then lists, and `quit` or SIGTERM take it out again. No cluster."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from fake_gpus.nvml import state
from fake_gpus.nvml.mps_control import SOCKET, write_launcher


@pytest.fixture
def node(tmp_path: Path):
    """(env for the tool, the node's state directory, its GPU UUIDs); any daemon left is terminated after."""
    nvml = tmp_path / "nvml"
    uuids = [g.uuid for g in state.create_state_dir(nvml, [("h100-80gb", 2)])]
    launcher = write_launcher(tmp_path / "bin")
    env = {**os.environ, "FAKE_NVML_STATE_DIR": str(nvml), "CUDA_MPS_PIPE_DIRECTORY": str(tmp_path / "pipe"),
           "CUDA_MPS_LOG_DIRECTORY": str(tmp_path / "log"), "CUDA_VISIBLE_DEVICES": uuids[1]}
    yield env, nvml, uuids, str(launcher)
    for d in state.read_mps_daemons(nvml):
        os.kill(d.pid, signal.SIGKILL)


def _run(launcher: str, env: dict, *args: str, stdin: str = "") -> subprocess.CompletedProcess:
    return subprocess.run([launcher, *args], input=stdin, env=env, capture_output=True, text=True, timeout=60)


def _gone(nvml: Path, pid: int) -> bool:
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if not any(d.pid == pid for d in state.read_mps_daemons(nvml)):
            return True
        time.sleep(0.05)
    return False


def test_daemon_lists_its_gpu_and_the_limits_piped_to_it_then_quits(node) -> None:
    env, nvml, uuids, launcher = node
    assert _run(launcher, env, "-d").returncode == 0
    (daemon,) = state.read_mps_daemons(nvml)
    assert (daemon.gpu, daemon.active_thread_percentage, daemon.pinned_mib, daemon.multi_user) == (1, None, None, False)
    assert daemon.pipe_dir == env["CUDA_MPS_PIPE_DIRECTORY"]
    assert _run(launcher, env, stdin="set_default_active_thread_percentage 25\n").stdout == "25.0\n"
    assert _run(launcher, env, stdin=f"set_default_device_pinned_mem_limit {uuids[1]} 3G\n").returncode == 0
    assert _run(launcher, env, stdin="get_default_device_pinned_mem_limit 0\n").stdout == "3072M\n"  # index among its own devices
    (daemon,) = state.read_mps_daemons(nvml)
    assert (daemon.active_thread_percentage, daemon.pinned_mib) == (25, 3072)
    second = _run(launcher, env, "-d")
    assert second.returncode == 1 and "already running" in second.stderr
    assert _run(launcher, env, stdin="quit\n").returncode == 0
    assert _gone(nvml, daemon.pid)
    assert not (Path(env["CUDA_MPS_PIPE_DIRECTORY"]) / SOCKET).exists()
    assert "Control daemon started" in (Path(env["CUDA_MPS_LOG_DIRECTORY"]) / "control.log").read_text()
    lost = _run(launcher, env, stdin="quit\n")
    assert lost.returncode == 1 and "Cannot find MPS control daemon" in lost.stderr


def test_a_terminated_daemon_leaves_no_record_and_multi_user_is_recorded(node) -> None:
    env, nvml, uuids, launcher = node
    env = {**env, "CUDA_VISIBLE_DEVICES": f"{uuids[0]},{uuids[1]}"}
    assert _run(launcher, env, "-d", "-M").returncode == 0
    daemons = state.read_mps_daemons(nvml)
    assert [(d.gpu, d.multi_user) for d in daemons] == [(0, True), (1, True)] and len({d.pid for d in daemons}) == 1
    os.kill(daemons[0].pid, signal.SIGTERM)
    assert _gone(nvml, daemons[0].pid)


def test_bad_usage_is_one_line_and_exit_2_and_bad_values_are_refused(node) -> None:
    env, nvml, _, launcher = node
    bad = _run(launcher, env, "-x")
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and "valid: -d [-M]" in bad.stderr
    assert _run(launcher, env, "-d").returncode == 0
    refused = _run(launcher, env, stdin="set_default_active_thread_percentage 101\n")
    assert "valid: 0 to 100" in refused.stdout
    assert state.read_mps_daemons(nvml)[0].active_thread_percentage is None
    assert _run(launcher, env, stdin="quit\n").returncode == 0


def test_a_corrupt_mps_file_is_a_state_error_naming_it(tmp_path: Path) -> None:
    nvml = tmp_path / "nvml"
    state.create_state_dir(nvml, [("h100-80gb", 1)])
    (nvml / "mps").write_text("fake-nvml-mps 1\ndaemon 5 1 - - 0 /p\n")
    with pytest.raises(state.StateError, match=r"mps:2: MPS daemon on GPU 5, but the node has 1"):
        state.read_mps_daemons(nvml)
