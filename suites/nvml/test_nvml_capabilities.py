"""The fake NVML keeps the nvidia-caps capability files in step with its GPU and compute instances.

NVIDIA's DRA driver reads /proc/driver/nvidia/capabilities/gpu<minor>/mig/gi<G>/access (and ci<C>)
right after creating an instance; the library writes that tree under the node's state directory
whenever it stores MIG state, and Python (capabilities.py) writes the same tree for its own writes.
"""

from __future__ import annotations

import ctypes

import pynvml

from fake_gpus.nvml import capabilities, state


def _expected(d):
    gpus, mig = state.validate_state_dir(d)
    return capabilities.state_files(d, gpus, mig)


def test_instances_have_capability_files_and_lose_them_on_destroy(make_node):
    d = make_node([("h100-80gb", 2)], mig=True)
    handle = pynvml.nvmlDeviceGetHandleByIndex(1)
    info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(handle, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
    placement = ctypes.pointer(pynvml.c_nvmlGpuInstancePlacement_t(6, 1))  # C takes a pointer
    gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(handle, info.id, placement)
    gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
    ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE,
                                                                  pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED)
    ci = pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
    ci_id = pynvml.nvmlComputeInstanceGetInfo(ci).id

    files = capabilities.read_files(d)
    gi_file = f"proc/driver/nvidia/capabilities/gpu1/mig/gi{gi_id}/access"
    ci_file = f"proc/driver/nvidia/capabilities/gpu1/mig/gi{gi_id}/ci{ci_id}/access"
    # nvidia-modprobe's table: gpu1 starts at 3 + 135; GI 13 (1g at slice 6) is 9 minors per GI further
    assert gi_id == 13 and files[gi_file] == capabilities.access_text(3 + 135 + 13 * 9)
    assert files[ci_file] == capabilities.access_text(3 + 135 + 13 * 9 + 1 + ci_id)
    assert files == _expected(d), "the C library and capabilities.py disagree on the tree"

    pynvml.nvmlComputeInstanceDestroy(ci)
    assert ci_file not in capabilities.read_files(d) and gi_file in capabilities.read_files(d)
    pynvml.nvmlGpuInstanceDestroy(gi)
    files = capabilities.read_files(d)
    assert not any("/gi" in f for f in files), files
    assert files == _expected(d)
    assert not (d / "proc/driver/nvidia/capabilities/gpu1/mig" / f"gi{gi_id}").exists()


def test_python_writes_and_reset_rewrite_the_tree(make_node):
    d = make_node([("h100-80gb", 1)], mig=True)
    pynvml.nvmlShutdown()
    mig = state.MigState(modes={0: (1, 1)},
                         gpu_instances=[state.GpuInstanceRecord(0, 1, 9, 0, 4)],
                         compute_instances=[state.ComputeInstanceRecord(0, 1, 0, 2, 0, 3, "MIG-00000000-0000-4000-8000-000000000001")])
    state.write_mig_state(d, mig)
    assert "proc/driver/nvidia/capabilities/gpu0/mig/gi1/ci0/access" in capabilities.read_files(d)
    state.reset_state_dir(d)
    assert capabilities.read_files(d) == _expected(d) == capabilities.expected_files([0], [])
    pynvml.nvmlInit()


def test_mig_minors_table_matches_the_files():
    table = dict(line.rsplit(" ", 1) for line in capabilities.mig_minors_text([0, 1]).splitlines())
    assert table["config"] == "1" and table["monitor"] == "2"
    assert table["gpu0/gi0/access"] == "3" and table["gpu0/gi0/ci7/access"] == "11" and table["gpu0/gi1/access"] == "12"
    assert table["gpu1/gi0/access"] == str(capabilities.caps_minor(1, 0)) == "138"
