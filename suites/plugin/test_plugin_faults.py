"""Each kubelet-plugin fault switch breaks a check that passes without it: the checks bite.

A check runs once against a correct plugin (must pass) and once against a plugin with the switch on
(must fail), on fresh NVML state each time.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Callable

import grpc
import pytest

from conftest import cdi_env, container_view, device_nodes
from fake_gpus.driver.kubeletplugin.kubelet_client import ClaimId, KubeletClient
from fake_gpus.machine.provision import provision
from fake_gpus.node import NodeHardware
from fake_gpus.nvml.capabilities import caps_minor
from fake_gpus.nvml.state import validate_state_dir

pytestmark = pytest.mark.cluster

MIG = "gpu-0-mig-2g20gb-14-2"
NEIGHBOUR = "gpu-0-mig-1g10gb-19-0"
# The kubelet gives a prepare call a deadline; a plugin that never answers runs into it.
PREPARE_DEADLINE = 15.0


def prepare_ok(k: KubeletClient, claim: ClaimId):
    response = k.prepare([claim], timeout=PREPARE_DEADLINE)
    entry = response.claims[claim.uid]
    assert entry.error == "", entry.error
    assert len(entry.devices) == 1
    return entry.devices[0]


def check_prepare_answers_with_devices(k, claim, plugin, mig_instances, state_dir, neighbour: ClaimId) -> None:
    try:
        prepare_ok(k, claim)
    except grpc.RpcError as exc:
        raise AssertionError(f"prepare failed: {exc.code()}") from exc


def check_unprepare_frees_the_instance(k, claim, plugin, mig_instances, state_dir, neighbour: ClaimId) -> None:
    prepare_ok(k, claim)
    assert len(mig_instances(state_dir)) == 1
    assert k.unprepare([claim]).claims[claim.uid].error == ""
    assert mig_instances(state_dir) == [], "MIG instance left behind after unprepare"


def check_container_sees_its_device(k, claim, plugin, mig_instances, state_dir, neighbour: ClaimId) -> None:
    prepare_ok(k, neighbour)  # another MIG device on the same GPU, which the container must not see
    device = prepare_ok(k, claim)
    (cdi_id,) = device.cdi_device_ids
    kind, name = cdi_id.split("=", 1)
    (spec,) = [s for s in (json.loads(p.read_text()) for p in plugin.cdi_dir.glob("*.json")) if any(d["name"] == name for d in s["devices"])]
    view = container_view(spec, cdi_id)
    # exactly one GPU visible, and through it exactly one MIG device: the one allocated
    assert len(view) == 1 and len(view[0]["migs"]) == 1, f"container sees {view}"
    assert cdi_env(spec, cdi_id)["NVIDIA_VISIBLE_DEVICES"] == view[0]["migs"][0], f"container sees {view}"
    # in a real container the device nodes decide: exactly the caps nodes of that MIG device
    (ci,) = [c for c in validate_state_dir(state_dir)[1].compute_instances if c.uuid == view[0]["migs"][0]]
    caps = {f"/dev/nvidia-caps/nvidia-cap{caps_minor(view[0]['minor'], ci.gi, i)}" for i in (None, ci.id)}
    nodes = device_nodes(spec, cdi_id)
    assert {n for n in nodes if "nvidia-caps" in n} == caps and f"/dev/nvidia{view[0]['minor']}" in nodes, f"container sees nodes {nodes}"


# fault -> (check, what its failure message must say: the check fails for the fault's reason)
CHECKS: dict[str, tuple[Callable, str]] = {
    "prepare-fails": (check_prepare_answers_with_devices, "injected fault prepare-fails"),
    "prepare-hangs": (check_prepare_answers_with_devices, "DEADLINE_EXCEEDED"),
    "unprepare-leaks": (check_unprepare_frees_the_instance, "left behind"),
    "cdi-wrong-device": (check_container_sees_its_device, "container sees"),
}


@pytest.mark.parametrize("fault", sorted(CHECKS))
def test_fault_switch_breaks_its_check(fault: str, start_plugin, node_dir: Path, kubelet, make_claim, mig_instances) -> None:
    check, reason = CHECKS[fault]
    outcomes = {}
    for faults in ((), (fault,)):
        state_dir = node_dir / f"nvml-{'-'.join(faults) or 'correct'}"
        provision(state_dir, NodeHardware("h100-80gb", 1))
        plugin = start_plugin(state_dir, faults=faults)
        claim, neighbour = make_claim([MIG]), make_claim([NEIGHBOUR])
        try:
            check(kubelet(plugin), claim, plugin, mig_instances, state_dir, neighbour)
            outcomes[faults] = "passed"
        except AssertionError as exc:
            outcomes[faults] = f"failed: {exc}"
        plugin.terminate()
    assert outcomes[()] == "passed", f"the check fails on a correct plugin: {outcomes[()]}"
    assert outcomes[(fault,)].startswith("failed"), f"the check still passes with {fault} on"
    assert reason in outcomes[(fault,)], outcomes[(fault,)]
