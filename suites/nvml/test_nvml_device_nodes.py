"""Where the driver's device nodes are (a container given GPUs through CDI), NVML shows what they open.

Real NVML can only open the device nodes a container was given: /dev/nvidia<minor> for a GPU and, for a
MIG device, the nvidia-caps nodes of its GPU and compute instance. The fake does the same once
/dev/nvidiactl is present, ignoring NVIDIA_VISIBLE_DEVICES (NVIDIA's CDI specs set it to `void`). Each
case runs a client in a private mount namespace with a tmpfs /dev holding exactly the nodes under test,
and the state directory read-only at the node's default place (no FAKE_NVML_STATE_DIR), as a pod sees it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import textwrap

import pytest

from fake_gpus.node.device_majors import NVIDIA_CAPS_MAJOR, NVIDIA_MAJOR
from fake_gpus.machine.views import ensure_machine
from fake_gpus.nvml.capabilities import caps_minor
from fake_gpus.nvml.state import NODE_STATE_DIR, validate_state_dir
from nvml_helpers import VIEW, json_lines

@pytest.fixture
def in_container(client_env):
    """run(state_dir, nodes) -> the JSON lines of a client (VIEW, or the Python file `program`) whose /dev holds
    just `nodes` (name -> (major, minor))."""
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.fail("these tests need root and util-linux `unshare` (a private mount namespace with its own /dev)")

    def run(state_dir, nodes: dict[str, tuple[int, int]], env: dict[str, str] | None = None, program=None) -> list:
        steps = ["mount -t tmpfs none /dev", "mknod -m 666 /dev/null c 1 3", "mkdir /dev/nvidia-caps",
                 # the node's place for its state, read-only as every container on the node sees it
                 "mount -t tmpfs none /var/lib", f"mkdir -p {NODE_STATE_DIR}",
                 f"mount --bind {shlex.quote(str(state_dir))} {NODE_STATE_DIR}", f"mount -o remount,bind,ro {NODE_STATE_DIR}"]
        steps += [f"mknod -m 666 /dev/{name} c {major} {minor}" for name, (major, minor) in nodes.items()]
        script = " && ".join(steps) + ' && exec "$@"'
        environment = client_env(None, env)
        proc = subprocess.run(["unshare", "--mount", "--propagation", "private", "--", "/bin/sh", "-c", script, "sh",
                               sys.executable, *([str(program)] if program else ["-c", textwrap.dedent(VIEW)])],
                              env=environment, capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"client failed ({proc.returncode}):\n{proc.stdout}\n{proc.stderr}"
        return json_lines(proc)

    return run


def _gpu(minor: int) -> dict[str, tuple[int, int]]:
    return {f"nvidia{minor}": (NVIDIA_MAJOR, minor)}


def _mig(gpu_minor: int, gi: int, ci: int, major: int = NVIDIA_CAPS_MAJOR) -> dict[str, tuple[int, int]]:
    nodes = {}
    for minor in (caps_minor(gpu_minor, gi), caps_minor(gpu_minor, gi, ci)):
        nodes[f"nvidia-caps/nvidia-cap{minor}"] = (major, minor)
    return nodes


CTL = {"nvidiactl": (NVIDIA_MAJOR, 255)}


def test_a_container_sees_exactly_the_gpus_whose_device_nodes_it_has(in_container, three_gpu_node):
    d, gpus, uuids = three_gpu_node
    ensure_machine(d)  # the node's /proc/devices view names the nvidia-caps major
    assert in_container(d, {**CTL, **_gpu(gpus[0].minor), **_gpu(gpus[2].minor)}) == [
        [gpus[0].uuid, gpus[0].minor, []], [gpus[2].uuid, gpus[2].minor, []]]
    # NVIDIA's CDI spec sets NVIDIA_VISIBLE_DEVICES=void: ignored where device nodes decide
    assert in_container(d, {**CTL, **_gpu(gpus[2].minor)}, {"NVIDIA_VISIBLE_DEVICES": "void"}) == [[gpus[2].uuid, gpus[2].minor, []]]
    assert in_container(d, CTL) == []
    # a node that is not NVIDIA's (wrong major) opens nothing
    assert in_container(d, {**CTL, f"nvidia{gpus[0].minor}": (1, gpus[0].minor)}) == []


def test_a_container_sees_only_the_mig_devices_whose_caps_nodes_it_has(in_container, three_gpu_node):
    d, gpus, uuids = three_gpu_node
    ensure_machine(d)
    _, mig = validate_state_dir(d)
    cis = sorted((c.gi, c.id, c.uuid) for c in mig.compute_instances if c.gpu == 1)
    by_uuid = {u: (gi, ci) for gi, ci, u in cis}
    m = gpus[1].minor
    for uuid in uuids:
        gi, ci = by_uuid[uuid]
        assert in_container(d, {**CTL, **_gpu(m), **_mig(m, gi, ci)}) == [[gpus[1].uuid, m, [uuid]]]
    both = {**CTL, **_gpu(m)}
    for uuid in uuids:
        both.update(_mig(m, *by_uuid[uuid]))
    assert in_container(d, both) == [[gpus[1].uuid, m, sorted(uuids, key=lambda u: by_uuid[u])]]
    # the parent GPU without caps nodes: the GPU, none of its MIG devices
    assert in_container(d, {**CTL, **_gpu(m)}) == [[gpus[1].uuid, m, []]]
    # caps nodes of the wrong major, or only the GPU instance's: hidden
    gi, ci = by_uuid[uuids[0]]
    assert in_container(d, {**CTL, **_gpu(m), **_mig(m, gi, ci, major=NVIDIA_MAJOR)}) == [[gpus[1].uuid, m, []]]
    only_gi = {f"nvidia-caps/nvidia-cap{caps_minor(m, gi)}": (NVIDIA_CAPS_MAJOR, caps_minor(m, gi))}
    assert in_container(d, {**CTL, **_gpu(m), **only_gi}) == [[gpus[1].uuid, m, []]]
    # the node-wide mig/config or mig/monitor capability (a MIG manager such as a DRA driver): every MIG device
    for minor in (1, 2):
        assert in_container(d, {**CTL, **_gpu(m), f"nvidia-caps/nvidia-cap{minor}": (NVIDIA_CAPS_MAJOR, minor)}) == [[gpus[1].uuid, m, uuids]]


def test_without_nvidiactl_the_environment_narrows_as_for_a_plain_process(in_container, three_gpu_node):
    d, gpus, _ = three_gpu_node
    ensure_machine(d)
    rows = in_container(d, _gpu(gpus[0].minor), {"NVIDIA_VISIBLE_DEVICES": gpus[2].uuid})
    assert [r[0] for r in rows] == [gpus[2].uuid]


def test_the_mig_monitor_capability_shows_a_leaked_gpu_instance_to_the_workload_report(in_container, three_gpu_node):
    """The conformance suite's leak probe (a privileged pod: every device node, mig/monitor among them) must
    see a GPU instance a driver left behind without its compute instance: no MIG device, yet its slices
    are taken. A pod given only the GPU sees neither that nor the MIG devices (the blind spot it replaced)."""
    import fake_gpus.nvml.report as report_module
    from fake_gpus.catalog import get_board
    from fake_gpus.nvml import state

    d, gpus, uuids = three_gpu_node
    ensure_machine(d)
    _, mig = validate_state_dir(d)
    board = get_board(gpus[1].board)
    profile = next(p for p in board.gpu_instance_profiles if p.id == mig.gpu_instances[0].profile_id)
    start = profile.placements[2]  # the fixture's two MIG devices sit at the first two placements
    gid = board.memory_slices // profile.memory_slices - 1 + start // profile.memory_slices  # as the fixture numbers them
    leaked = state.GpuInstanceRecord(1, gid, profile.id, start, profile.memory_slices)
    mig.gpu_instances.append(leaked)
    state.write_mig_state(d, mig)
    m = gpus[1].minor

    def gpu_row(nodes):
        (out,) = in_container(d, nodes, program=report_module.__file__)
        return next(g for g in out["devices"] if g["uuid"] == gpus[1].uuid)

    monitor = gpu_row({**CTL, **_gpu(m), "nvidia-caps/nvidia-cap2": (NVIDIA_CAPS_MAJOR, 2)})
    assert sorted(x["uuid"] for x in monitor["mig_devices"]) == sorted(uuids)
    assert {(g["id"], g["start"]) for g in monitor["gpu_instances"]} == {(g.id, g.start) for g in mig.gpu_instances if g.gpu == 1}
    assert (leaked.id, leaked.start) in {(g["id"], g["start"]) for g in monitor["gpu_instances"]}
    blind = gpu_row({**CTL, **_gpu(m)})
    assert blind["mig_mode"] == 1 and blind["mig_devices"] == [] and blind["gpu_instances"] == []
