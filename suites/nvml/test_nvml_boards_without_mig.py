"""Boards without MIG (T4, L4, L40S) as the real tools show them: NVML answers every MIG call NOT_SUPPORTED,
`fake-nvidia-smi mig ...` says "No MIG-supported devices found." with exit 6, and on a node that mixes them
with a MIG board the MIG views list the MIG GPU only."""

from __future__ import annotations

import ctypes

import pynvml
import pytest

from fake_gpus.catalog import get_board
from fake_gpus.nvml import state

SMI = "import sys; from fake_gpus.nvml.smi import main; sys.exit(main(sys.argv[1:]))"


def _smi(run_client, d, *args: str):
    return run_client(f"import sys; sys.argv[1:] = {list(args)!r}\n" + SMI, d, check=False)


@pytest.mark.parametrize("key", ["t4-16gb", "l4-24gb", "l40s-48gb"])
def test_every_mig_call_is_not_supported(make_node, key):
    assert not get_board(key).mig_capable
    make_node([(key, 1)])
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    calls = [
        lambda: pynvml.nvmlDeviceGetMigMode(h),
        lambda: pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE),
        lambda: pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE),
        lambda: pynvml.nvmlDeviceCreateGpuInstance(h, 19),
        lambda: pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, 19, None, ctypes.byref(ctypes.c_uint(0))),
    ]
    for call in calls:
        with pytest.raises(pynvml.NVMLError_NotSupported):
            call()
    assert pynvml.nvmlDeviceGetName(h) == get_board(key).product_name


def test_fake_nvidia_smi_on_a_node_without_mig(run_client, tmp_path):
    d = tmp_path / "node"
    gpus = state.create_state_dir(d, [("t4-16gb", 2)])
    for flag in ("-lgip", "-lgipp", "-lgi", "-lci"):
        done = _smi(run_client, d, "mig", flag)
        assert (done.returncode, done.stdout) == (6, "No MIG-supported devices found.\n"), flag
    listing = _smi(run_client, d, "-L")
    assert listing.returncode == 0 and listing.stdout.splitlines() == [f"GPU {i}: Tesla T4 (UUID: {g.uuid})" for i, g in enumerate(gpus)]
    table = _smi(run_client, d).stdout
    assert "Tesla T4" in table and "N/A" in table and "15360MiB" in table


def test_mig_views_of_a_mixed_node_list_the_mig_gpu_only(run_client, tmp_path):
    d = tmp_path / "node"
    state.create_state_dir(d, [("a100-80gb", 1), ("l4-24gb", 1)])
    lgipp = _smi(run_client, d, "mig", "-lgipp")
    assert lgipp.returncode == 0
    assert {line.split()[1] for line in lgipp.stdout.splitlines()} == {"0"}, lgipp.stdout
    assert len(lgipp.stdout.splitlines()) == len(get_board("a100-80gb").gpu_instance_profiles)
    lgip = _smi(run_client, d, "mig", "-lgip").stdout
    assert "MIG 1g.10gb" in lgip and "|   1  MIG" not in lgip
