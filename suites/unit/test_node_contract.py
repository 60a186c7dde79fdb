"""A node's hardware contract (fake_gpus.node) and its one provisioning path (fake_gpus.machine.provision):
one mode parser, one label codec, used alike by both backends, the publisher and replay."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest

from fake_gpus.driver.nvml_adapter import NvmlLibrary, inventory
from fake_gpus.machine.provision import ProvisionError, check_hardware, node_labels, provision
from fake_gpus.node import LabelError, Mode, ModeError, NodeHardware, hardware_from_labels, hardware_labels, parse_mode
from fake_gpus.nvml.build import SONAME, ensure_library
from testbed.clusters.base import ClusterError
from testbed.clusters.kind.nodes import node_labels as kind_labels
from testbed.clusters.kind.nodes import provision_state
from testbed.clusters.kwok.nodes import node_object
from testbed.clusters.layout import Layout, LayoutError, NodeSpec, check_layout, from_flags, load_layout
from testbed.workloads.bundle import layout_from_nodes, layout_yaml

HARDWARE = [
    NodeHardware("h100-80gb", 8),
    NodeHardware("b200-180gb", 2, Mode("dynamic-mig")),
    NodeHardware("h100-80gb", 1, Mode("static-mig", "all-balanced")),
    NodeHardware("h200-141gb", 4, Mode("static-mig", "all-3g.71gb")),
]


@pytest.mark.parametrize("text, mode", [("whole", Mode("whole")), ("dynamic-mig", Mode("dynamic-mig")),
                                        ("static-mig:all-balanced", Mode("static-mig", "all-balanced"))])
def test_one_parser_reads_every_mode_back_from_its_text(text: str, mode: Mode):
    assert parse_mode(text) == mode and str(mode) == text


def test_layout_flags_use_the_contract_parser_and_name_where():
    with pytest.raises(LayoutError, match=r"^--node a=h100-80gb:1:static-mig: unknown mode 'static-mig'; valid modes: "):
        from_flags(["a=h100-80gb:1:static-mig"])
    with pytest.raises(ModeError):
        parse_mode("static-mig")


@pytest.mark.parametrize("hardware", HARDWARE, ids=str)
def test_labels_round_trip(hardware: NodeHardware):
    assert hardware_from_labels(hardware_labels(hardware)) == hardware


def test_labels_of_a_node_without_fake_gpus_and_malformed_labels():
    assert hardware_from_labels(None) is None
    assert hardware_from_labels({"kubernetes.io/os": "linux"}) is None
    labels = hardware_labels(HARDWARE[2])
    with pytest.raises(LabelError, match="gpu-count='two' is not a whole number"):
        hardware_from_labels({**labels, "dra-testbed.io/gpu-count": "two"})
    with pytest.raises(LabelError, match="static-mig needs dra-testbed.io/mig-layout"):
        hardware_from_labels({k: v for k, v in labels.items() if k != "dra-testbed.io/mig-layout"})


@pytest.mark.parametrize("hardware", HARDWARE, ids=str)
def test_both_backends_write_the_same_hardware_labels(hardware: NodeHardware):
    spec = NodeSpec("n-0", hardware.board, hardware.count, hardware.mode)
    kwok = node_object(spec)["metadata"]["labels"]
    kind = kind_labels(spec)
    assert hardware_from_labels(kwok) == hardware_from_labels(kind) == hardware
    assert kwok["nvidia.com/gpu.product"] == kind["nvidia.com/gpu.product"] == node_labels(hardware)["nvidia.com/gpu.product"]


def test_replay_reads_a_static_mig_node_back_with_its_layout(tmp_path: Path):
    """The bundle's observed layout of a running cluster keeps each node's whole mode (it used to keep
    only `static-mig`, which no parser accepts, so a static-MIG node could not be replayed)."""
    layout = from_flags([f"n-{i}={h.board}:{h.count}:{h.mode}" for i, h in enumerate(HARDWARE)])
    nodes = [SimpleNamespace(metadata=SimpleNamespace(name=n.name, labels=node_object(n)["metadata"]["labels"])) for n in layout.nodes]
    core = SimpleNamespace(list_node=lambda label_selector: SimpleNamespace(items=nodes))
    observed = layout_from_nodes(core)
    assert [n.hardware for n in observed.nodes] == HARDWARE
    file = tmp_path / "layout.yaml"
    file.write_text(layout_yaml(observed))
    assert load_layout(file).nodes == observed.nodes


@pytest.mark.parametrize("hardware, message", [
    (NodeHardware("h100-40gb", 1), "unknown board 'h100-40gb'; valid boards: "),
    (NodeHardware("h100-80gb", 1, Mode("static-mig", "nope")), "MIG layout 'nope' of h100-80gb is unknown; valid layouts: all-balanced"),
])
def test_unprovisionable_hardware_is_refused_in_one_line(tmp_path: Path, hardware: NodeHardware, message: str):
    with pytest.raises(ProvisionError, match=message):
        check_hardware(hardware)
    with pytest.raises(ProvisionError, match=message):
        provision(tmp_path / "nvml", hardware)
    assert not (tmp_path / "nvml").exists()  # nothing half-done
    layout = Layout((NodeSpec("n-0", hardware.board, hardware.count, hardware.mode),))
    with pytest.raises(LayoutError, match="^node n-0: " + message):
        check_layout(layout)


def test_kind_provisioning_applies_the_same_check(tmp_path: Path):
    """kind provisions through the same path as KWOK: the same usable-layout check and message (it used to
    have its own check, of the catalog's names only, with a message of its own)."""
    node = NodeSpec("k-0", "h100-80gb", 1, Mode("static-mig", "nope"))
    with pytest.raises(ClusterError, match="^node k-0: MIG layout 'nope' of h100-80gb is unknown; valid layouts: all-balanced"):
        provision_state(tmp_path / "nvml", node)
    assert not (tmp_path / "nvml").exists()


def test_provision_makes_the_static_layout_once_and_fresh_starts_over(tmp_path: Path):
    nvml = NvmlLibrary(ensure_library() / SONAME)
    state = tmp_path / "nvml"
    hardware = NodeHardware("h100-80gb", 2, Mode("static-mig", "all-balanced"))
    provision(state, hardware, nvml=nvml)
    first = inventory(nvml, state)
    profiles = sorted(p.name for g in first.gpus for m in g.mig_devices for p in g.profiles if p.id == m.profile_id)
    # all-balanced on an H100 80GB: 2 x 1g.10gb, 1 x 2g.20gb, 1 x 3g.40gb per GPU (gpu-operator default mig-parted config)
    assert profiles == sorted(["3g.40gb", "2g.20gb", "1g.10gb", "1g.10gb"] * 2)
    provision(state, hardware, nvml=nvml)  # a restarted publisher: the same instances, the same UUIDs
    assert inventory(nvml, state) == first
    provision(state, hardware, nvml=nvml, fresh=True)
    again = inventory(nvml, state)
    assert [m.uuid for g in again.gpus for m in g.mig_devices] != [m.uuid for g in first.gpus for m in g.mig_devices]
