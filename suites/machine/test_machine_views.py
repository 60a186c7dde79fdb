"""A node's views outside NVML (driver root, /proc, /sys) and a plain process that runs with them."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
from fake_gpus.driver.pci import read_place
from fake_gpus.machine import namespace
from fake_gpus.machine.views import ensure_machine
from fake_gpus.nvml import state
from fake_gpus.nvml.build import SONAME, ensure_library


@pytest.fixture
def node8(tmp_path: Path):
    d = tmp_path / "node"
    state.create_state_dir(d, [("h100-80gb", 8)])
    return ensure_machine(d)


def test_sysfs_view_gives_two_pcie_roots_and_two_numa_nodes(node8):
    gpus, _ = state.validate_state_dir(node8.state_dir)
    places = [read_place(g.bus_id, node8.sysfs) for g in gpus]
    roots = [p.pcie_root for p in places]
    assert roots[:4] == [roots[0]] * 4 and roots[4:] == [roots[4]] * 4 and roots[0] != roots[4]
    assert all(r.startswith("pci0000:") for r in roots)
    assert [p.numa_node for p in places] == [0] * 4 + [1] * 4
    gpu_dir = node8.sysfs / "bus/pci/devices" / gpus[5].bus_id.lower()[4:]
    assert (gpu_dir / "vendor").read_text() == "0x10de\n" and (gpu_dir / "class").read_text() == "0x030200\n"
    assert (gpu_dir / "device").read_text() == "0x2330\n"  # H100 SXM5 80GB
    # the host's own sysfs has no such device: no attributes there, as on NVIDIA's driver
    assert read_place(gpus[0].bus_id, Path("/nonexistent")).pcie_root is None


def test_driver_root_holds_library_and_an_nvidia_smi_that_answers_version(node8):
    lib_dir = node8.driver_root / "usr/lib/x86_64-linux-gnu"
    real = lib_dir / "libnvidia-ml.so.580.95.05"
    assert real.is_file() and not real.is_symlink()
    assert real.read_bytes() == (ensure_library() / SONAME).read_bytes()
    assert os.path.realpath(lib_dir / "libnvidia-ml.so.1") == str(real)
    smi = node8.driver_root / "usr/bin/nvidia-smi"
    env = {k: v for k, v in os.environ.items() if k != "FAKE_NVML_STATE_DIR"}
    env["LD_LIBRARY_PATH"] = str(lib_dir)
    out = subprocess.run([str(smi), "--version"], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "580.95.05" in out.stdout
    # a driver root with /dev is NVIDIA's device root: the GPUs' nodes with the nvidia major, one minor each
    for minor in range(8):
        st = os.stat(node8.driver_root / "dev" / f"nvidia{minor}")
        assert stat.S_ISCHR(st.st_mode) and (os.major(st.st_rdev), os.minor(st.st_rdev)) == (195, minor)
    assert os.minor(os.stat(node8.driver_root / "dev" / "nvidiactl").st_rdev) == 255


def test_proc_devices_view_names_the_nvidia_caps_major(node8):
    text = node8.proc_devices.read_text()
    chars, _, blocks = text.partition("Block devices:")
    assert "510 nvidia-caps\n" in chars and "195 nvidia-frontend\n" in chars and blocks.strip()


def test_a_process_in_the_namespace_sees_the_views_and_the_host_keeps_its_own(node8, tmp_path):
    script = ("cat /proc/driver/nvidia/capabilities/mig/config; readlink /sys/bus/pci/devices/0000:24:00.0; "
              "cat /sys/bus/pci/devices/0000:24:00.0/numa_node; ls /sys/devices/system/cpu >/dev/null && echo cpu-ok; "
              "echo $ALT_PROC_DEVICES_PATH")
    env = {**os.environ, **namespace.environment(node8)}
    out = subprocess.run(namespace.wrap(["sh", "-c", script], node8), env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    assert lines[0] == "DeviceFileMinor: 1"
    assert lines[3] == "../../../devices/pci0000:23/0000:23:01.0/0000:24:00.0" and lines[4] == "1"
    assert lines[5] == "cpu-ok" and lines[6] == str(node8.proc_devices)
    # nothing reached the host's mount table, and the host's /proc/driver is its own
    assert str(node8.state_dir) not in Path("/proc/self/mounts").read_text()
    assert not Path("/proc/driver/nvidia/capabilities").exists()


def test_capability_files_created_inside_the_namespace_are_seen_there(node8):
    """An NVML user in the namespace creates an instance; the same process reads its file in /proc/driver."""
    code = ("import ctypes, pynvml as n; n.nvmlInit(); h = n.nvmlDeviceGetHandleByIndex(0); n.nvmlDeviceSetMigMode(h, 1);"
            "p = ctypes.pointer(n.c_nvmlGpuInstancePlacement_t(4, 4)); gi = n.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, p);"
            "i = n.nvmlGpuInstanceGetInfo(gi).id; print(open(f'/proc/driver/nvidia/capabilities/gpu0/mig/gi{i}/access').read());"
            "n.nvmlGpuInstanceDestroy(gi); import os; print(os.path.exists(f'/proc/driver/nvidia/capabilities/gpu0/mig/gi{i}'))")
    env = {**os.environ, **namespace.environment(node8), "LD_LIBRARY_PATH": str(node8.driver_root / "usr/lib/x86_64-linux-gnu")}
    out = subprocess.run(namespace.wrap([sys.executable, "-c", code], node8), env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert "DeviceFileMinor: 21" in out.stdout  # 3g.40gb at slice 4 is GI 2: 3 + 2 * 9
    assert out.stdout.strip().endswith("False")


def test_our_driver_reads_pcie_root_and_numa_from_the_view(node8):
    inv = inventory(NvmlLibrary(ensure_library() / SONAME), node8.state_dir)
    assert [g.numa_node for g in inv.gpus] == [0] * 4 + [1] * 4
    assert len({g.pcie_root for g in inv.gpus}) == 2
