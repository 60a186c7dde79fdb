"""Fixtures for the fake NVML suite.

The library is built once per session. Tests drive it through nvidia-ml-py (pynvml) in this
process: the fake library is loaded by absolute path and handed to pynvml as its CDLL, and
fakeNvmlSetStateDir points it at a fresh state directory per test (between nvmlShutdown and
nvmlInit), so no LD_LIBRARY_PATH is needed here. Behaviour that depends on the environment at
nvmlInit (visible devices, FAKE_NVML_STATE_DIR) or on several processes runs in subprocesses.
"""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Callable, Iterator, Sequence

import pynvml
import pytest

from fake_gpus.nvml import state
from fake_gpus.nvml.build import SONAME, ensure_library
from nvml_helpers import mig_board_keys

REPO = Path(__file__).resolve().parents[2]



@pytest.fixture(scope="session")
def nvml_lib_dir() -> Path:
    return ensure_library()


@pytest.fixture(scope="session")
def nvml_lib(nvml_lib_dir: Path) -> ctypes.CDLL:
    """The fake library, also installed as pynvml's library for this process."""
    lib = ctypes.CDLL(str(nvml_lib_dir / SONAME))
    if pynvml.nvmlLib is None:
        pynvml.nvmlLib = lib
    if pynvml.nvmlLib._handle != lib._handle:
        pytest.fail("pynvml already loaded another libnvidia-ml.so.1 in this process")
    lib.fakeNvmlSetStateDir.argtypes = [ctypes.c_char_p]
    return lib


@pytest.fixture
def make_node(nvml_lib: ctypes.CDLL, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Callable[..., Path]]:
    """make_node([(board, count), ...], mig=False) -> state dir, with pynvml initialized on it."""
    for var in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    active: list[Path] = []

    def make(boards: Sequence[tuple[str, int]] = (("h100-80gb", 1),), mig: bool = False) -> Path:
        if active:
            pynvml.nvmlShutdown()
            active.clear()
        d = tmp_path / f"node{len(list(tmp_path.iterdir()))}"
        state.create_state_dir(d, boards)
        assert nvml_lib.fakeNvmlSetStateDir(str(d).encode()) == pynvml.NVML_SUCCESS
        pynvml.nvmlInit()
        active.append(d)
        if mig:
            for i in range(pynvml.nvmlDeviceGetCount()):
                assert pynvml.nvmlDeviceSetMigMode(pynvml.nvmlDeviceGetHandleByIndex(i), pynvml.NVML_DEVICE_MIG_ENABLE) == 0
        return d

    yield make
    if active:
        pynvml.nvmlShutdown()
    # Back to refcount 0: setting the state dir is refused while the library is initialized.
    assert nvml_lib.fakeNvmlSetStateDir(None) == pynvml.NVML_SUCCESS, "a test left NVML initialized"


@pytest.fixture
def client_env(nvml_lib_dir: Path) -> Callable[..., dict[str, str]]:
    """Environment for a fresh client process that finds the fake via LD_LIBRARY_PATH."""

    def env_for(state_dir: Path | None, extra: dict[str, str] | None = None) -> dict[str, str]:
        e = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES", "FAKE_NVML_STATE_DIR")}
        e["LD_LIBRARY_PATH"] = f"{nvml_lib_dir}:{e.get('LD_LIBRARY_PATH', '')}".rstrip(":")
        e["PYTHONPATH"] = f"{REPO}:{e.get('PYTHONPATH', '')}".rstrip(":")
        if state_dir is not None:
            e["FAKE_NVML_STATE_DIR"] = str(state_dir)
        e.update(extra or {})
        return e

    return env_for


@pytest.fixture
def run_client(client_env: Callable[..., dict[str, str]]) -> Callable[..., subprocess.CompletedProcess]:
    """Run a Python snippet (pynvml against the fake) in a fresh process; check=True asserts exit 0."""

    def run(code: str, state_dir: Path | None, env: dict[str, str] | None = None, check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=client_env(state_dir, env),
                              capture_output=True, text=True, timeout=600)
        if check and proc.returncode != 0:
            raise AssertionError(f"client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}")
        return proc

    return run


@pytest.fixture
def three_gpu_node(tmp_path):
    """A node of 3 GPUs; GPU 1 has MIG on with two 1-slice MIG devices."""
    key = mig_board_keys()[0]
    from fake_gpus.catalog import get_board

    board = get_board(key)
    d = tmp_path / "node"
    gpus = state.create_state_dir(d, [(key, 3)])
    p = min(board.gpu_instance_profiles, key=lambda p: (p.memory_slices, p.id))
    cp = max(p.compute_instance_profiles, key=lambda c: c.slice_count)
    mig = state.MigState(modes={1: (1, 1)})
    uuids = ["MIG-11111111-2222-4333-8444-555555555555", "MIG-aaaaaaaa-bbbb-4ccc-8ddd-eeeeeeeeeeee"]
    for n, start in enumerate(p.placements[:2]):
        gid = board.memory_slices // p.memory_slices - 1 + start // p.memory_slices
        mig.gpu_instances.append(state.GpuInstanceRecord(1, gid, p.id, start, p.memory_slices))
        mig.compute_instances.append(state.ComputeInstanceRecord(1, gid, 0, cp.id, 0, cp.slice_count, uuids[n]))
    state.write_mig_state(d, mig)
    return d, gpus, uuids
