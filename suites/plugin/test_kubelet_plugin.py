"""The kubelet plugin through its gRPC API, driven by a client acting as the kubelet over the real sockets.

Claims live in a real API server (KWOK); devices in a fake NVML state directory, inspected through
nvidia-ml-py in separate processes; CDI specs are read from the plugin's CDI directory.
"""

from __future__ import annotations

import json

import grpc
import pytest

from conftest import DRIVER, NODE, VIEW, cdi_env, container_env, container_view, device_nodes, mig_instances_raw, run_nvml
from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId
from fake_gpus.nvml.capabilities import caps_minor

pytestmark = pytest.mark.cluster

MIG_1G = "gpu-0-mig-1g10gb-19-3"  # 1g.10gb at memory slice 3 of GPU 0


def prepared_devices(response, claim: ClaimId) -> list:
    entry = response.claims[claim.uid]
    assert entry.error == "", entry.error
    return list(entry.devices)


def spec_files(plugin) -> list:
    return sorted(plugin.cdi_dir.glob("*.json")) if plugin.cdi_dir.exists() else []


def read_spec(plugin) -> dict:
    (path,) = spec_files(plugin)
    return json.loads(path.read_text())


def test_registration_names_the_driver_and_both_api_versions(start_plugin, state_dir, kubelet) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    info = k.get_info()
    assert (info.type, info.name, info.endpoint) == ("DRAPlugin", DRIVER, str(plugin.dra_socket))
    assert list(info.supported_versions) == ["v1.DRAPlugin", "v1beta1.DRAPlugin"]
    k.notify_registered(True)
    assert plugin.registration_socket.is_socket() and plugin.dra_socket.is_socket()


def test_dynamic_mig_prepare_creates_the_instance_at_its_placement_and_unprepare_removes_it(
        start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claim = make_claim([MIG_1G])
    assert mig_instances(state_dir) == []

    (device,) = prepared_devices(k.prepare([claim]), claim)
    assert (list(device.request_names), device.pool_name, device.device_name) == (["gpu"], NODE, MIG_1G)
    assert mig_instances(state_dir) == [{"minor": 0, "profile": "1g.10gb", "start": 3, "size": 1, "compute_instances": 1}]
    spec = read_spec(plugin)
    assert spec["cdiVersion"] >= "0.6.0" and spec["kind"] == f"k8s.{DRIVER}/device"
    (cdi_id,) = device.cdi_device_ids
    env = cdi_env(spec, cdi_id)
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    # a container given this CDI device sees exactly that one MIG device, on GPU 0
    view = container_view(spec, cdi_id)
    assert [(g["minor"], g["migs"]) for g in view] == [(0, [env["NVIDIA_VISIBLE_DEVICES"]])]
    # in a real container the device nodes decide (the fake NVML's view there): GPU 0 and its instances' caps
    (gi,) = mig_instances_raw(state_dir)
    assert device_nodes(spec, cdi_id) >= {"/dev/nvidia0", "/dev/nvidiactl", f"/dev/nvidia-caps/nvidia-cap{caps_minor(0, gi[0])}",
                                          f"/dev/nvidia-caps/nvidia-cap{caps_minor(0, gi[0], gi[1])}"}
    assert not any(n.startswith("/dev/nvidia1") for n in device_nodes(spec, cdi_id))

    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == []
    assert spec_files(plugin) == []


def test_the_spec_mounts_the_driver_roots_nvidia_smi_and_libnvidia_ml_where_nvidias_does(start_plugin, state_dir, kubelet, make_claim) -> None:
    """NVIDIA's CDI spec mounts a driver root's /usr/bin/nvidia-smi and libnvidia-ml.so.<version> (plus the
    .so.1 and .so names) into every container of a claim; ours does the same from the node's fake driver
    root, so `nvidia-smi -L` in a plain image works. The mounted nvidia-smi, given the device's
    environment, lists exactly the allocated MIG device under its GPU."""
    import subprocess

    from fake_gpus.catalog import get_board

    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claim = make_claim([MIG_1G])
    (device,) = prepared_devices(k.prepare([claim]), claim)
    spec = read_spec(plugin)
    version = get_board("h100-80gb").driver_version
    root = state_dir.resolve() / "driver-root"
    mounts = {m["containerPath"]: m for m in spec["containerEdits"]["mounts"]}
    library = str(root / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}")
    assert {path: m["hostPath"] for path, m in mounts.items()} == {
        "/usr/bin/nvidia-smi": str(root / "usr/bin/nvidia-smi"),
        **{f"/usr/lib/x86_64-linux-gnu/{name}": library for name in (f"libnvidia-ml.so.{version}", "libnvidia-ml.so.1", "libnvidia-ml.so")}}
    assert all(m["options"][:1] == ["ro"] and "rbind" in m["options"] for m in mounts.values())
    env = cdi_env(spec, device.cdi_device_ids[0])
    out = subprocess.run([mounts["/usr/bin/nvidia-smi"]["hostPath"], "-L"], env={"PATH": "/usr/bin:/bin", **env},
                         capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert len(lines) == 2 and lines[0].startswith("GPU 0: ") and "1g.10gb" in lines[1] and env["NVIDIA_VISIBLE_DEVICES"] in lines[1], lines
    assert k.unprepare([claim]).claims[claim.uid].error == ""


def test_dynamic_mig_prepare_of_a_double_memory_1g(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    """1g.20gb (one compute slice over two memory slices) prepares like any profile: its GPU instance and a compute instance."""
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claim = make_claim(["gpu-0-mig-1g20gb-15-2"])
    (device,) = prepared_devices(k.prepare([claim]), claim)
    assert device.device_name == "gpu-0-mig-1g20gb-15-2"
    assert mig_instances(state_dir) == [{"minor": 0, "profile": "1g.20gb", "start": 2, "size": 2, "compute_instances": 1}]
    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == []


def test_whole_gpu_prepare_exposes_only_that_gpu(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claim = make_claim(["gpu-1"])
    (device,) = prepared_devices(k.prepare([claim]), claim)
    view = container_view(read_spec(plugin), device.cdi_device_ids[0])
    assert [(g["minor"], g["migs"]) for g in view] == [(1, [])]
    nodes = device_nodes(read_spec(plugin), device.cdi_device_ids[0])
    assert "/dev/nvidia1" in nodes and "/dev/nvidia0" not in nodes and not any("nvidia-caps" in n for n in nodes), nodes
    assert mig_instances(state_dir) == []
    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert spec_files(plugin) == []


@pytest.mark.parametrize("first, second", [("gpu-1", MIG_1G), (MIG_1G, "gpu-0-mig-1g10gb-19-5")])
def test_a_container_with_two_claims_sees_the_devices_of_both(start_plugin, state_dir, kubelet, make_claim, first, second) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claims = make_claim([first]), make_claim([second])
    response = k.prepare(list(claims))
    ids = [prepared_devices(response, claim)[0].cdi_device_ids[0] for claim in claims]
    specs = [json.loads(path.read_text()) for path in spec_files(plugin)]
    # what each claim alone shows, merged per GPU: a GPU appears once, with the MIG devices of both claims
    want: dict[int, list[str]] = {}
    for device_id in ids:
        for gpu in run_nvml(VIEW, container_env(specs, [device_id])):
            want[gpu["minor"]] = sorted({*want.get(gpu["minor"], []), *gpu["migs"]})
    assert len(want) == len({first.split("-mig")[0], second.split("-mig")[0]})
    # in either order of the claims: NVIDIA_VISIBLE_DEVICES of the last one must not hide the other's device
    for order in (ids, ids[::-1]):
        view = run_nvml(VIEW, container_env(specs, order))
        assert [(g["minor"], sorted(g["migs"])) for g in view] == sorted(want.items()), f"container sees {view}"
    assert all(k.unprepare(list(claims)).claims[c.uid].error == "" for c in claims)


def test_prepare_twice_is_idempotent(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claim = make_claim(["gpu-0-mig-3g40gb-9-4"])
    first = prepared_devices(k.prepare([claim]), claim)
    spec = read_spec(plugin)
    second = prepared_devices(k.prepare([claim]), claim)
    assert first == second
    assert read_spec(plugin) == spec
    assert len(mig_instances(state_dir)) == 1
    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert k.unprepare([claim]).claims[claim.uid].error == ""  # again: nothing left to do is success
    assert mig_instances(state_dir) == []


def test_unprepare_of_an_unknown_claim_succeeds(start_plugin, state_dir, kubelet) -> None:
    k = kubelet(start_plugin(state_dir))
    claim = ClaimId("nowhere", "00000000-0000-0000-0000-000000000000", "never-prepared")
    assert k.unprepare([claim]).claims[claim.uid].error == ""


def test_restart_between_prepare_and_unprepare_keeps_the_claim(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    plugin = start_plugin(state_dir)
    claim = make_claim([MIG_1G, "gpu-1"])
    devices = prepared_devices(kubelet(plugin).prepare([claim]), claim)
    spec = read_spec(plugin)
    plugin.kill9()
    plugin.start()
    k = kubelet(plugin)
    assert prepared_devices(k.prepare([claim]), claim) == devices  # the checkpoint answers, nothing is created twice
    assert len(mig_instances(state_dir)) == 1 and read_spec(plugin) == spec
    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == [] and spec_files(plugin) == []
    assert plugin.checkpoint["claims"] == {}


def test_restart_unprepare_without_reprepare_cleans_up(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    plugin = start_plugin(state_dir)
    claim = make_claim(["gpu-1-mig-2g20gb-14-2"])
    prepared_devices(kubelet(plugin).prepare([claim]), claim)
    plugin.kill9()
    plugin.start()
    assert kubelet(plugin).unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == [] and spec_files(plugin) == []


@pytest.mark.parametrize("device, message", [
    ("gpu-7", "does not exist"),
    ("gpu-0-mig-3g40gb-9-2", "no placement"),
    ("gpu-0-mig-9g90gb-99-0", "not offered"),
])
def test_prepare_of_a_device_that_does_not_exist_is_a_per_claim_error(
        start_plugin, state_dir, kubelet, make_claim, mig_instances, device, message) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    bad, good = make_claim([device]), make_claim(["gpu-0"])
    response = k.prepare([bad, good])
    assert message in response.claims[bad.uid].error
    assert prepared_devices(response, good)[0].device_name == "gpu-0"
    assert mig_instances(state_dir) == []
    assert k.unprepare([good]).claims[good.uid].error == ""


def test_static_mig_device_destroyed_since_allocation_is_a_per_claim_error(
        start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    # setup: a static-MIG node whose 1g.10gb at slice 3 was allocated, then destroyed by someone else
    k = kubelet(start_plugin(state_dir, mig="static"))
    claim = make_claim([MIG_1G])
    response = k.prepare([claim])
    assert "does not exist" in response.claims[claim.uid].error
    assert mig_instances(state_dir) == []


def test_claim_problems_are_per_claim_errors(start_plugin, state_dir, kubelet, make_claim, apiserver) -> None:
    k = kubelet(start_plugin(state_dir))
    unallocated = make_claim(["gpu-0"], allocate=False)
    missing = ClaimId(apiserver.namespace, "11111111-1111-1111-1111-111111111111", "no-such-claim")
    replaced = make_claim(["gpu-0"])
    replaced = ClaimId(replaced.namespace, "22222222-2222-2222-2222-222222222222", replaced.name)
    response = k.prepare([unallocated, missing, replaced])
    assert "not allocated" in response.claims[unallocated.uid].error
    assert "not found" in response.claims[missing.uid].error
    assert "UID" in response.claims[replaced.uid].error


def test_devices_of_other_drivers_and_pools_are_left_alone(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    k = kubelet(start_plugin(state_dir))
    other_pool = make_claim([MIG_1G], pool="another-node")
    assert prepared_devices(k.prepare([other_pool]), other_pool) == []
    assert mig_instances(state_dir) == []


def test_v1beta1_service_prepares_and_unprepares(start_plugin, state_dir, kubelet, make_claim, mig_instances) -> None:
    plugin = start_plugin(state_dir)
    k = kubelet(plugin)
    claim = make_claim(["gpu-1-mig-1g10gb-19-0"])
    response = k.prepare([claim], version="v1beta1")
    assert type(response).DESCRIPTOR.full_name == "k8s.io.kubelet.pkg.apis.dra.v1beta1.NodePrepareResourcesResponse"
    (device,) = prepared_devices(response, claim)
    assert device.device_name == "gpu-1-mig-1g10gb-19-0"
    assert mig_instances(state_dir) == [{"minor": 1, "profile": "1g.10gb", "start": 0, "size": 1, "compute_instances": 1}]
    assert k.unprepare([claim], version="v1beta1").claims[claim.uid].error == ""
    assert mig_instances(state_dir) == []


def test_health_stream_lists_every_device_as_healthy(start_plugin, state_dir, kubelet, protos) -> None:
    k = kubelet(start_plugin(state_dir))
    stream = k.watch_health()
    try:
        first = next(stream)
    finally:
        stream.cancel()
    names = {d.device.device_name for d in first.devices}
    assert {"gpu-0", "gpu-1", MIG_1G, "gpu-1-mig-7g80gb-0-0"} <= names
    assert {d.device.pool_name for d in first.devices} == {NODE}
    assert {d.health for d in first.devices} == {protos.health.HEALTHY}


def test_sigterm_stops_serving_and_removes_the_sockets(start_plugin, state_dir, kubelet) -> None:
    plugin = start_plugin(state_dir)
    kubelet(plugin).get_info()
    assert plugin.terminate() == 0, "".join(plugin.lines[-30:])
    assert not plugin.registration_socket.exists() and not plugin.dra_socket.exists()
    with plugin.client() as k, pytest.raises(grpc.RpcError) as err:
        k.get_info(wait_for_ready=False)
    assert err.value.code() == grpc.StatusCode.UNAVAILABLE


CREATE_1G_AT_3 = """
import ctypes, json, pynvml
pynvml.nvmlInit()
h = pynvml.nvmlDeviceGetHandleByIndex(0)
pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
info = pynvml.nvmlDeviceGetGpuInstanceProfileInfoV(h, pynvml.NVML_GPU_INSTANCE_PROFILE_1_SLICE)
gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, info.id, ctypes.pointer(pynvml.c_nvmlGpuInstancePlacement_t(3, 1)))
pynvml.nvmlGpuInstanceCreateComputeInstance(gi, pynvml.NVML_COMPUTE_INSTANCE_PROFILE_1_SLICE)
print(json.dumps([pynvml.nvmlDeviceGetUUID(h), info.id]))
"""


def crash_mid_prepare(plugin, claim: ClaimId, nvml_lib_dir, state_dir) -> None:
    """Leave the node as a plugin killed inside prepare leaves it: checkpoint says PREPARING, instance exists."""
    from conftest import run_nvml
    from fake_gpus.driver.kubeletplugin.checkpoint import PREPARING, Checkpoint, ClaimRecord, MigRecord

    plugin.kill9()
    gpu_uuid, profile_id = run_nvml(CREATE_1G_AT_3, {"LD_LIBRARY_PATH": str(nvml_lib_dir), "FAKE_NVML_STATE_DIR": str(state_dir)})
    checkpoint = Checkpoint(plugin.plugin_dir / "checkpoint.json").load()
    checkpoint.claims[claim.uid] = ClaimRecord(claim.namespace, claim.name, PREPARING, planned=[MigRecord(gpu_uuid, profile_id, 3, 1)])
    checkpoint.save()
    plugin.start()


def test_crash_inside_prepare_then_unprepare_leaks_nothing(start_plugin, state_dir, kubelet, make_claim, mig_instances, nvml_lib_dir) -> None:
    plugin = start_plugin(state_dir)
    claim = make_claim([MIG_1G])
    crash_mid_prepare(plugin, claim, nvml_lib_dir, state_dir)
    assert len(mig_instances(state_dir)) == 1
    assert kubelet(plugin).unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == [] and plugin.checkpoint["claims"] == {}


def test_crash_inside_prepare_then_prepare_again_adopts_the_instance(start_plugin, state_dir, kubelet, make_claim, mig_instances, nvml_lib_dir) -> None:
    plugin = start_plugin(state_dir)
    claim = make_claim([MIG_1G])
    crash_mid_prepare(plugin, claim, nvml_lib_dir, state_dir)
    k = kubelet(plugin)
    (device,) = prepared_devices(k.prepare([claim]), claim)
    assert device.device_name == MIG_1G and len(mig_instances(state_dir)) == 1  # the half-made instance is reused
    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == []  # ... and owned: unprepare destroys it


def test_a_directory_that_is_no_state_dir_is_a_clear_start_error(node_dir, nvml_lib_dir) -> None:
    import subprocess
    import sys

    empty = node_dir / "not-a-node"
    empty.mkdir()
    proc = subprocess.run([sys.executable, "-m", "fake_gpus.driver.kubeletplugin", "--node-name", "n", "--state-dir", str(empty),
                           "--nvml-lib-dir", str(nvml_lib_dir), "--plugin-dir", str(node_dir / "p"), "--registry-dir", str(node_dir / "r"),
                           "--cdi-dir", str(node_dir / "c"), "--kubeconfig", str(node_dir / "none")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 1
    assert "kubelet plugin failed to start" in proc.stderr and "Traceback" not in proc.stderr
    assert not (node_dir / "r").exists() or list((node_dir / "r").iterdir()) == []
