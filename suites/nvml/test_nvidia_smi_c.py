"""The C nvidia-smi (fake_gpus/nvml/src/tools) shows what NVML shows: per board, its output is checked
against the same node read through nvidia-ml-py, with MIG instances on the first GPU where the board
has MIG. Also the calls NVIDIA's DRA driver makes (-c, -pm, compute-policy --set-timeslice) change what
NVML then reports, and bad usage is one line with exit 2."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from fake_gpus.catalog import BOARD_KEYS, get_board
from fake_gpus.nvml import state
from fake_gpus.nvml.build import SMI

# The node as nvidia-ml-py sees it, after creating on GPU 0 (MIG boards) an instance of the two smallest
# profiles, each with one compute instance filling it.
NVML_VIEW = """
import json, ctypes, pynvml as n
n.nvmlInit()
out = {"driver": n.nvmlSystemGetDriverVersion(), "cuda": n.nvmlSystemGetCudaDriverVersion(), "gpus": []}
for i in range(n.nvmlDeviceGetCount()):
    h = n.nvmlDeviceGetHandleByIndex(i)
    try:
        mig = n.nvmlDeviceGetMigMode(h)[0]
    except n.NVMLError_NotSupported:
        mig = None
    if i == 0 and mig is not None and CREATE:
        n.nvmlDeviceSetMigMode(h, 1)
        mig = 1
        for enum in (0, 1):
            gi = n.nvmlDeviceCreateGpuInstance(h, n.nvmlDeviceGetGpuInstanceProfileInfo(h, enum).id)
            n.nvmlGpuInstanceCreateComputeInstance(gi, 0)
    pci = n.nvmlDeviceGetPciInfo_v3(h)
    mem = n.nvmlDeviceGetMemoryInfo(h)
    g = {"name": n.nvmlDeviceGetName(h), "uuid": n.nvmlDeviceGetUUID(h), "serial": n.nvmlDeviceGetSerial(h),
         "bus": pci.busId, "pci": pci.pciDeviceId, "total": mem.total >> 20, "used": mem.used >> 20,
         "cc": "%d.%d" % n.nvmlDeviceGetCudaComputeCapability(h), "mig": mig, "migs": [], "gis": [], "cis": [], "profiles": []}
    if mig:
        for j in range(n.nvmlDeviceGetMaxMigDeviceCount(h)):
            try:
                m = n.nvmlDeviceGetMigDeviceHandleByIndex(h, j)
            except n.NVMLError_NotFound:
                continue
            g["migs"].append([n.nvmlDeviceGetName(m), n.nvmlDeviceGetUUID(m)])
    for enum in range(n.NVML_GPU_INSTANCE_PROFILE_COUNT):
        try:
            p = n.nvmlDeviceGetGpuInstanceProfileInfo(h, enum)
        except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
            continue
        count = ctypes.c_uint(0)
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, None, ctypes.byref(count))
        buf = (n.c_nvmlGpuInstancePlacement_t * count.value)()
        n.nvmlDeviceGetGpuInstancePossiblePlacements(h, p.id, buf, ctypes.byref(count))
        try:
            free = n.nvmlDeviceGetGpuInstanceRemainingCapacity(h, p.id)
        except n.NVMLError_NotSupported:  # MIG off: nvidia-smi shows none free
            free = 0
        g["profiles"].append({"id": p.id, "instances": f"{free}/{p.instanceCount}", "sm": p.multiprocessorCount,
                              "mem": round(p.memorySizeMB / 1024, 2), "starts": [x.start for x in buf],
                              "size": buf[0].size if count.value else 0})
        gis = (n.c_nvmlGpuInstance_t * max(1, p.instanceCount))()
        if not mig:
            continue  # no GPU instances on a GPU with MIG off (NVML: not supported)
        n.nvmlDeviceGetGpuInstances(h, p.id, gis, ctypes.byref(count))
        for k in range(count.value):
            info = n.nvmlGpuInstanceGetInfo(gis[k])
            g["gis"].append([info.profileId, info.id, info.placement.start, info.placement.size])
            for cenum in range(n.NVML_COMPUTE_INSTANCE_PROFILE_COUNT):
                try:
                    cp = n.nvmlGpuInstanceGetComputeInstanceProfileInfo(gis[k], cenum, 0)
                except (n.NVMLError_NotSupported, n.NVMLError_InvalidArgument):
                    continue
                cis = (n.c_nvmlComputeInstance_t * max(1, cp.instanceCount))()
                cc = ctypes.c_uint(0)
                n.nvmlGpuInstanceGetComputeInstances(gis[k], cp.id, cis, ctypes.byref(cc))
                for c in range(cc.value):
                    ci = n.nvmlComputeInstanceGetInfo(cis[c])
                    g["cis"].append([info.id, cp.id, ci.id, ci.placement.start, ci.placement.size])
    out["gpus"].append(g)
print(json.dumps(out))
"""


def _smi(nvml_lib_dir: Path, client_env, state_dir: Path, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    out = subprocess.run([str(nvml_lib_dir / SMI), *args], env=client_env(state_dir), capture_output=True, text=True, timeout=60)
    assert not check or out.returncode == 0, out.stderr
    return out


def _view(run_client, state_dir: Path, create: bool) -> dict:
    return json.loads(run_client(f"CREATE = {create}\n" + NVML_VIEW, state_dir).stdout)


@pytest.mark.parametrize("board", BOARD_KEYS)
def test_nvidia_smi_shows_what_nvml_shows(board, tmp_path, run_client, client_env, nvml_lib_dir) -> None:
    d = tmp_path / "node"
    state.create_state_dir(d, [(board, 2)])
    _view(run_client, d, create=True)
    view = _view(run_client, d, create=False)  # read again, as the nvidia-smi below reads it: instances included
    smi = lambda *a: _smi(nvml_lib_dir, client_env, d, *a).stdout  # noqa: E731

    assert f"DRIVER version      : {view['driver']}" in smi("--version")
    assert f"CUDA Version        : {view['cuda'] // 1000}.{view['cuda'] % 1000 // 10}" in smi("--version")

    want = []
    for i, g in enumerate(view["gpus"]):
        want.append(f"GPU {i}: {g['name']} (UUID: {g['uuid']})")
        want += [f"  MIG {name.split('MIG ', 1)[-1]:<11} Device {j:>2}: (UUID: {uuid})" for j, (name, uuid) in enumerate(g["migs"])]
    assert smi("-L").splitlines() == want

    # the default table (no arguments): the title's versions, then two rows per GPU (index and name, bus id,
    # MIG mode; memory usage), a subset of the real table's columns
    table = smi().splitlines()
    cuda = f"{view['cuda'] // 1000}.{view['cuda'] % 1000 // 10}"
    assert any(re.fullmatch(rf"\| NVIDIA-SMI {re.escape(view['driver'])}\s+Driver Version: {re.escape(view['driver'])}"
                            rf"\s+CUDA Version: {re.escape(cuda)}\s+\|", line) for line in table), table[:3]
    cells = [[c.strip() for c in line.strip("|").split("|")] for line in table if line.startswith("| ") and line.count("|") == 4]
    gpu_rows = [(first, bus, mig, second) for (first, bus, mig), (second, _, _) in zip(cells[2::2], cells[3::2])]  # after the 2 header rows
    assert gpu_rows == [(f"{i:>3}  {g['name']}"[:39].strip(), g["bus"], "N/A" if g["mig"] is None else "Enabled" if g["mig"] else "Disabled",
                         f"{g['used']}MiB / {g['total']}MiB") for i, g in enumerate(view["gpus"])], table

    fields = "index,name,uuid,serial,pci.bus_id,pci.device_id,memory.total,memory.used,compute_cap,mig.mode.current,driver_version"
    rows = [line.split(", ") for line in smi(f"--query-gpu={fields}", "--format=csv,noheader,nounits").splitlines()]
    assert rows == [[str(i), g["name"], g["uuid"], g["serial"], g["bus"], f"0x{g['pci']:08X}", str(g["total"]), str(g["used"]), g["cc"],
                     "[N/A]" if g["mig"] is None else "Enabled" if g["mig"] else "Disabled", view["driver"]]
                    for i, g in enumerate(view["gpus"])]
    csv = smi("--query-gpu=name,memory.total", "--format=csv").splitlines()
    assert csv[0] == "name, memory.total [MiB]" and csv[1] == f"{view['gpus'][0]['name']}, {view['gpus'][0]['total']} MiB"

    if not get_board(board).mig_capable:  # what the real tool says on a node of T4, L4 or L40S, with exit 6
        for flag in ("-lgip", "-lgipp", "-lgi", "-lci"):
            done = _smi(nvml_lib_dir, client_env, d, "mig", flag, check=False)
            assert (done.returncode, done.stdout, done.stderr) == (6, "No MIG-supported devices found.\n", ""), flag
        return
    lgi = [line.split() for line in smi("mig", "-lgi").splitlines() if re.match(r"\|\s+\d+\s+MIG ", line)]
    assert [(int(r[1]), int(r[4]), int(r[5]), r[6]) for r in lgi] == \
        [(i, gi[0], gi[1], f"{gi[2]}:{gi[3]}") for i, g in enumerate(view["gpus"]) for gi in g["gis"]]
    lci = [line.split() for line in smi("mig", "-lci").splitlines() if re.match(r"\|\s+\d+\s+\d+\s+MIG ", line)]
    assert [(int(r[1]), int(r[2]), int(r[5]), int(r[6]), r[7]) for r in lci] == \
        [(i, ci[0], ci[1], ci[2], f"{ci[3]}:{ci[4]}") for i, g in enumerate(view["gpus"]) for ci in g["cis"]]

    lgipp = smi("mig", "-lgipp").splitlines()
    assert lgipp == [f"GPU  {i} Profile ID {p['id']:>2} Placements: {{{','.join(map(str, p['starts']))}}}:{p['size']}"
                     for i, g in enumerate(view["gpus"]) for p in g["profiles"]]
    lgip = [line.split() for line in smi("mig", "-lgip").splitlines() if re.match(r"\|\s+\d+\s+MIG ", line)]
    assert [(int(r[1]), int(r[4]), r[5], float(r[6]), int(r[8])) for r in lgip] == \
        [(i, p["id"], p["instances"], p["mem"], p["sm"]) for i, g in enumerate(view["gpus"]) for p in g["profiles"]]
    if get_board(board).gpu_instance_profiles:
        assert view["gpus"][0]["gis"] and view["gpus"][0]["migs"], "the MIG rows above were compared, not skipped"


GET_SETTINGS = """
import ctypes, pynvml as n
n.nvmlInit()
h = n.nvmlDeviceGetHandleByIndex(1)
ts = ctypes.c_uint(9)
assert n.nvmlLib.fakeNvmlDeviceGetTimeslice(h, ctypes.byref(ts)) == 0
print(n.nvmlDeviceGetComputeMode(h), n.nvmlDeviceGetPersistenceMode(h), ts.value, n.nvmlDeviceGetComputeMode(n.nvmlDeviceGetHandleByIndex(0)))
"""


def test_what_nvidias_driver_runs_changes_what_nvml_reports(tmp_path, run_client, client_env, nvml_lib_dir) -> None:
    """NVIDIA's plugin runs `nvidia-smi -i UUID -c MODE`, `compute-policy -i UUID --set-timeslice N` (time
    slicing, MPS) and `nvidia-smi -i BUSID -pm 0` (passthrough); each leaves its mark where NVML reads it."""
    d = tmp_path / "node"
    gpus = state.create_state_dir(d, [("h100-80gb", 2)])
    assert run_client(GET_SETTINGS, d).stdout.split() == ["0", "0", "0", "0"]  # defaults
    out = _smi(nvml_lib_dir, client_env, d, "-i", gpus[1].uuid, "-c", "EXCLUSIVE_PROCESS").stdout
    assert out == f"Set compute mode to EXCLUSIVE_PROCESS for GPU {gpus[1].bus_id}.\nAll done.\n"
    _smi(nvml_lib_dir, client_env, d, "compute-policy", "-i", gpus[1].uuid, "--set-timeslice", "2")
    _smi(nvml_lib_dir, client_env, d, "-i", gpus[1].bus_id, "-pm", "1")
    assert run_client(GET_SETTINGS, d).stdout.split() == ["3", "1", "2", "0"]  # GPU 1 changed, GPU 0 not
    query = _smi(nvml_lib_dir, client_env, d, "--query-gpu=compute_mode,persistence_mode", "--format=csv,noheader", "-i", "1")
    assert query.stdout == "Exclusive_Process, Enabled\n"
    _smi(nvml_lib_dir, client_env, d, "-i", gpus[1].uuid, "-c", "DEFAULT")
    _smi(nvml_lib_dir, client_env, d, "-i", gpus[1].bus_id, "-pm", "0")
    assert run_client(GET_SETTINGS, d).stdout.split()[:2] == ["0", "0"]


@pytest.mark.parametrize("args, words", [
    (["--query-gpu=name,bogus", "--format=csv"], 'Field "bogus" is not a valid field to query; valid: index,'),
    (["--query-gpu=name", "--format=csv,fancy"], '"fancy" is not a valid format option; valid: csv, noheader, nounits'),
    (["mig"], "mig needs -lgip, -lgipp, -lgi or -lci"),
    (["-i", "0", "-c", "SOMETIMES"], "-c takes 0|DEFAULT"),
    (["-c", "DEFAULT"], "need -i ID"),
    (["--frobnicate"], "unknown or incomplete option --frobnicate"),
])
def test_bad_usage_is_one_line_and_exit_2(args, words, tmp_path, client_env, nvml_lib_dir) -> None:
    d = tmp_path / "node"
    state.create_state_dir(d, [("h100-80gb", 1)])
    out = _smi(nvml_lib_dir, client_env, d, *args, check=False)
    assert out.returncode == 2 and out.stdout == "", out
    lines = out.stderr.strip().splitlines()
    assert words in lines[0] and len(lines) <= 2, lines  # the unknown option's line, then what is valid


def test_an_unknown_gpu_names_what_is_valid(tmp_path, client_env, nvml_lib_dir) -> None:
    d = tmp_path / "node"
    state.create_state_dir(d, [("h100-80gb", 1)])
    out = _smi(nvml_lib_dir, client_env, d, "-i", "GPU-nope", "-c", "0", check=False)
    assert out.returncode == 6 and "valid: an index below 1, a GPU UUID or a PCI bus id" in out.stderr
