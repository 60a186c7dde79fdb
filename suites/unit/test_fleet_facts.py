"""Hardware evolution's checks (testbed/workloads/fleet_facts.py) on slices our driver builds from a fake node's
NVML, without a cluster: a node published as it is passes; published as other hardware, gone, or holding a
device nobody claims, it fails."""

from __future__ import annotations

from pathlib import Path

import pytest

from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
from fake_gpus.driver.slices import api_limits, build_slices
from fake_gpus.machine.provision import provision
from fake_gpus.node import NodeHardware, parse_mode
from fake_gpus.nvml.build import SONAME, ensure_library
from testbed.workloads.devices import DeviceId, Inventory
from testbed.workloads.fleet_facts import fleet_facts, leaked, stranded
from testbed.workloads.oracle import Result

ID = DriverIdentity()
MODES = ("whole", "dynamic-mig", "static-mig:all-balanced")


@pytest.fixture(scope="module")
def nvml() -> NvmlLibrary:
    return NvmlLibrary(ensure_library() / SONAME)


def _slices(nvml: NvmlLibrary, where: Path, node: str, hardware: NodeHardware) -> list[dict]:
    provision(where / node, hardware, nvml=nvml, fresh=True)
    return build_slices(node, inventory(nvml, where / node), hardware.mode, api_limits("1.34"), ID)


@pytest.mark.parametrize("mode", MODES)
def test_a_node_published_as_it_is_passes_and_as_other_hardware_fails(mode: str, nvml, tmp_path) -> None:
    hardware = NodeHardware("h100-80gb", 2, parse_mode(mode))
    published = Inventory.from_slices(_slices(nvml, tmp_path, "n", hardware))
    assert fleet_facts(published, {"n": hardware}, ID.driver) == []
    for other in MODES:  # the same GPUs in another mode: what a publisher that ignored a mode switch shows
        if other != mode:
            problems = fleet_facts(published, {"n": NodeHardware("h100-80gb", 2, parse_mode(other))}, ID.driver)
            assert problems and all(p.property == "evolution" for p in problems), other
    replaced = fleet_facts(published, {"n": NodeHardware("b200-180gb", 2, parse_mode(mode))}, ID.driver)
    assert any("B200" in p.message for p in replaced), replaced  # boards replaced, slices not
    assert any("holds 3" in p.message for p in fleet_facts(published, {"n": NodeHardware("h100-80gb", 3, parse_mode(mode))}, ID.driver))


def test_slices_of_a_node_gone_and_a_node_without_slices_fail(nvml, tmp_path) -> None:
    hardware = NodeHardware("h200-141gb", 1, parse_mode("whole"))
    published = Inventory.from_slices(_slices(nvml, tmp_path, "old", hardware))
    assert any("gone" in p.message for p in fleet_facts(published, {}, ID.driver))
    assert any("no published device" in p.message for p in fleet_facts(published, {"old": hardware, "new": hardware}, ID.driver))


def test_a_claim_on_a_device_no_slice_publishes_is_stranded(nvml, tmp_path) -> None:
    published = Inventory.from_slices(_slices(nvml, tmp_path, "n", NodeHardware("h100-80gb", 1, parse_mode("whole"))))
    held = [("ns/a", "n", [Result("r", DeviceId(ID.driver, "n", "gpu-0"))])]
    assert stranded(published, held) == []
    vanished = [("ns/b", "n", [Result("r", DeviceId(ID.driver, "n", "gpu-0-mig-1g10gb-19-0"))])]
    assert "stranded" in stranded(published, vanished)[0].message
    assert "published for n" in stranded(published, [("ns/c", "m", held[0][2])])[0].message


def test_a_mig_instance_no_claim_holds_is_leaked() -> None:
    device = DeviceId(ID.driver, "n", "gpu-0-mig-1g10gb-19-3")
    assert leaked("n", {(0, 19, 3)}, [device]) == []
    assert leaked("n", set(), [device]) == []  # allocated, not prepared yet: no leak
    assert "leaked" in leaked("n", {(0, 19, 3), (0, 19, 4)}, [device])[0].message
