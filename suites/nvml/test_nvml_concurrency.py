"""Eight processes hammer one node's state directory; no instance may be lost or overlap another."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from fake_gpus.catalog import get_board
from fake_gpus.nvml import state
from nvml_helpers import mig_board_keys

WORKER = r'''
import json, os, random, sys, time
from pynvml import *
from fake_gpus.nvml import state

seed, target, profiles = int(sys.argv[1]), int(sys.argv[2]), json.loads(sys.argv[3])  # argv[0] is "-c"
deadline = time.monotonic() + 300
rnd = random.Random(seed)
nvmlInit()
h = nvmlDeviceGetHandleByIndex(0)
mine = {}  # gi id -> (gi handle, ci handle, profile id, start, MIG uuid); at most one held at a time
stats = dict(created=0, destroyed=0, refused=0, checks=0)

def check_no_overlap():
    _, mig = state.validate_state_dir(os.environ["FAKE_NVML_STATE_DIR"])  # one consistent snapshot
    spans = sorted((g.start, g.start + g.size, g.id) for g in mig.gpu_instances)
    for (a0, a1, ia), (b0, b1, ib) in zip(spans, spans[1:]):
        assert a1 <= b0, f"GPU instances {ia} and {ib} overlap: {spans}"
    stats["checks"] += 1

# Run until this process has created `target` instances itself: how many attempts that takes depends on how
# the scheduler interleaves the eight processes, so a fixed number of attempts could starve one of them.
op = 0
while stats["created"] < target or mine:
    if time.monotonic() > deadline:
        sys.exit(f"starved: {stats}")
    if op % 50 == 0:
        check_no_overlap()
    op += 1
    if mine:
        gid = rnd.choice(sorted(mine))
        gi, ci, pid, start, uuid = mine.pop(gid)
        info = nvmlGpuInstanceGetInfo(gi)  # still there, unchanged, still ours (the MIG UUID is random)
        assert (info.id, info.profileId, info.placement.start) == (gid, pid, start), "GPU instance changed"
        assert nvmlDeviceGetUUID(nvmlComputeInstanceGetInfo(ci).device) == uuid, "compute instance replaced"
        nvmlComputeInstanceDestroy(ci)
        nvmlGpuInstanceDestroy(gi)
        stats["destroyed"] += 1
    else:
        pid, ci_pid = rnd.choice(profiles)
        try:
            gi = nvmlDeviceCreateGpuInstance(h, pid)
        except NVMLError_InsufficientResources:
            stats["refused"] += 1
            time.sleep(0.0005)  # let a holder run and release its slices
            continue
        info = nvmlGpuInstanceGetInfo(gi)
        assert info.id not in mine
        ci = nvmlGpuInstanceCreateComputeInstance(gi, ci_pid)
        mine[info.id] = (gi, ci, pid, info.placement.start, nvmlDeviceGetUUID(nvmlComputeInstanceGetInfo(ci).device))
        stats["created"] += 1
check_no_overlap()
nvmlShutdown()
print(json.dumps(stats))
'''


@pytest.mark.slow
def test_eight_processes_share_one_state_dir(client_env, tmp_path):
    key = mig_board_keys()[0]
    board = get_board(key)
    d = tmp_path / "node"
    state.create_state_dir(d, [(key, 1)])
    state.write_mig_state(d, state.MigState(modes={0: (1, 1)}))
    # The small profiles (8 processes compete for 8 memory slices), each with its whole-instance compute profile.
    profiles = [(p.id, max(p.compute_instance_profiles, key=lambda c: c.slice_count).id)
                for p in board.gpu_instance_profiles if p.memory_slices <= 2]
    procs = [
        subprocess.Popen([sys.executable, "-c", WORKER, str(seed), "200", json.dumps(profiles)],
                         env=client_env(d), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for seed in range(8)
    ]
    stats = []
    for p in procs:
        out, err = p.communicate(timeout=600)
        assert p.returncode == 0, err
        stats.append(json.loads(out))
    print(stats)
    # every process created its 200 instances and destroyed each exactly once, checking for overlaps on the way
    assert all(s["created"] == s["destroyed"] == 200 for s in stats), stats
    assert all(s["checks"] >= 2 for s in stats), stats
    assert sum(s["refused"] for s in stats) > 0  # the processes really competed for slices
    _, mig = state.validate_state_dir(d)
    assert mig.gpu_instances == [] and mig.compute_instances == []
