"""Per-call latency of the fake NVML through nvidia-ml-py, against a no-op ctypes call.

    python benchmarks/nvml_latency.py [--seconds 1.0]

Measures nvmlDeviceGetMemoryInfo (a whole-GPU query, no state file), nvmlDeviceGetMigMode (reads
the node's MIG state under the shared lock) and a create+destroy GPU-instance pair (two exclusive
read-modify-write cycles of the state file), each against libc getpid() called through ctypes in
the same run.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import importlib.metadata
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import pynvml  # noqa: E402

from fake_gpus.nvml import state  # noqa: E402
from fake_gpus.nvml.build import SONAME, catalog_boards, ensure_library  # noqa: E402


def per_call(fn: Callable[[], object], seconds: float) -> float:
    """Mean seconds per call, over batches until `seconds` have passed (after a warm-up)."""
    for _ in range(100):
        fn()
    calls, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds:
        for _ in range(200):
            fn()
        calls += 200
    return elapsed / calls


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=1.0, help="time per measurement")
    args = parser.parse_args()

    lib = ctypes.CDLL(str(ensure_library() / SONAME))
    pynvml.nvmlLib = lib  # pynvml uses this CDLL instead of searching LD_LIBRARY_PATH
    board = next(b for b in catalog_boards() if b.gpu_instance_profiles)
    profile = min(board.gpu_instance_profiles, key=lambda p: p.memory_slices)
    with tempfile.TemporaryDirectory() as tmp:
        node = Path(tmp) / "node"
        state.create_state_dir(node, [(board.key, 8)])
        lib.fakeNvmlSetStateDir(str(node).encode())
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(0)
        pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)

        libc = ctypes.CDLL(ctypes.util.find_library("c"))
        getpid = libc.getpid

        def create_destroy() -> None:
            pynvml.nvmlGpuInstanceDestroy(pynvml.nvmlDeviceCreateGpuInstance(h, profile.id))

        noop = per_call(getpid, args.seconds)
        rows = [
            ("ctypes libc getpid() (no-op baseline)", noop),
            ("nvmlDeviceGetMemoryInfo", per_call(lambda: pynvml.nvmlDeviceGetMemoryInfo(h), args.seconds)),
            ("nvmlDeviceGetMigMode (reads state file)", per_call(lambda: pynvml.nvmlDeviceGetMigMode(h), args.seconds)),
            (f"create+destroy GPU instance ({profile.name})", per_call(create_destroy, args.seconds)),
        ]
        pynvml.nvmlShutdown()
    print(f"board {board.key}, 8 GPUs, Python {sys.version.split()[0]}, nvidia-ml-py {importlib.metadata.version('nvidia-ml-py')}")
    print(f"{'call':<48}{'us/call':>10}{'x no-op':>10}")
    for name, t in rows:
        print(f"{name:<48}{t * 1e6:>10.2f}{t / noop:>10.1f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
