"""Consumable shares in the node contract (fake_gpus.node), layouts, `--node` flags and NVIDIA's DaemonSets on kind:
one value per node (NVIDIA's --consumable-shares), carried by the mode text and a node label, refused in one line
when it is not one NVIDIA's plugin takes."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from fake_gpus.node import (
    HEALTH_LABEL,
    SHARES_LABEL,
    LabelError,
    Mode,
    ModeError,
    NodeHardware,
    hardware_from_labels,
    hardware_labels,
    parse_mode,
    parse_shares,
)
from testbed.clusters.kind.nodes import node_labels as kind_labels
from testbed.clusters.kwok.nodes import node_object
from testbed.clusters.layout import Layout, LayoutError, NodeSpec, from_flags, load_layout
from testbed.drivers.nvidia.kind import plugin_groups, render_manifest

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize("text, value", [("memory", "memory"), ("unlimited", "unlimited"), ("4", "4"), ("04", "4"),
                                         (" 1 ", "1"), ("disabled", None)])
def test_parse_shares_takes_nvidias_values(text: str, value: str | None) -> None:
    assert parse_shares(text) == value


@pytest.mark.parametrize("text", ["0", "-1", "1.5", "+4", "", "Memory", "all", "٣"])
def test_parse_shares_refuses_the_rest_in_one_line_naming_the_valid_values(text: str) -> None:
    with pytest.raises(ModeError) as err:
        parse_shares(text)
    message = str(err.value)
    assert "\n" not in message and repr(text) in message and "valid: disabled, memory, unlimited, <N>" in message


SHARED = [Mode("whole", shares="4"), Mode("static-mig", "all-balanced", "memory"), Mode("dynamic-mig", shares="unlimited")]


@pytest.mark.parametrize("mode", SHARED, ids=str)
def test_mode_text_round_trips_with_its_shares(mode: Mode) -> None:
    assert parse_mode(str(mode)) == mode
    assert str(mode).endswith(f":shares={mode.shares}")


def test_mode_text_without_shares_and_disabled_read_as_no_sharing() -> None:
    assert parse_mode("whole") == parse_mode("whole:shares=disabled") == Mode("whole")
    assert str(Mode("whole")) == "whole"


@pytest.mark.parametrize("mode", SHARED, ids=str)
def test_labels_carry_the_shares_on_both_backends(mode: Mode) -> None:
    hardware = NodeHardware("h100-80gb", 2, mode)
    labels = hardware_labels(hardware)
    assert labels[SHARES_LABEL] == mode.shares
    assert hardware_from_labels(labels) == hardware
    spec = NodeSpec("n-0", "h100-80gb", 2, mode)
    assert hardware_from_labels(node_object(spec)["metadata"]["labels"]) == hardware_from_labels(kind_labels(spec)) == hardware


def test_a_node_without_sharing_has_no_shares_label_and_a_bad_label_is_refused() -> None:
    labels = hardware_labels(NodeHardware("h100-80gb", 1))
    assert SHARES_LABEL not in labels
    with pytest.raises(LabelError, match=rf"^label {SHARES_LABEL}: consumable shares '0' is not valid; valid: "):
        hardware_from_labels({**labels, SHARES_LABEL: "0"})


def test_node_flag_takes_shares_on_every_mode() -> None:
    layout = from_flags(["a=h100-80gb:2:whole:shares=4", "b=h100-80gb:1:static-mig:all-balanced:shares=memory",
                         "c=b200-180gb:1:dynamic-mig:shares=unlimited"])
    assert [n.mode for n in layout.nodes] == [Mode("whole", shares="4"), Mode("static-mig", "all-balanced", "memory"),
                                              Mode("dynamic-mig", shares="unlimited")]


@pytest.mark.parametrize("flag", ["a=h100-80gb:1:whole:shares=0", "a=h100-80gb:1:whole:shares=", "a=h100-80gb:1:whole:shares=half"])
def test_node_flag_with_bad_shares_is_one_line_naming_the_flag(flag: str) -> None:
    with pytest.raises(LayoutError) as err:
        from_flags([flag])
    message = str(err.value)
    assert message.startswith(f"--node {flag}: consumable shares ") and "valid: disabled, memory, unlimited, <N>" in message
    assert "\n" not in message


def test_up_refuses_shares_0_with_exit_2_before_anything_starts() -> None:
    done = subprocess.run([sys.executable, "-m", "testbed.cli", "up", "--node", "n=h100-80gb:1:whole:shares=0"],
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 2, done.stderr
    last = done.stderr.strip().splitlines()[-1]
    assert "--node n=h100-80gb:1:whole:shares=0: consumable shares '0' is not valid; valid: disabled, memory, unlimited, <N>" in last


def _layout_file(tmp_path: Path, **entry: object) -> Path:
    file = tmp_path / "layout.yaml"
    file.write_text(yaml.safe_dump({"nodes": [{"name": "a", "board": "h100-80gb", "count": 2, **entry}]}))
    return file


@pytest.mark.parametrize("value, shares", [("memory", "memory"), ("unlimited", "unlimited"), (4, "4"), ("disabled", None)])
def test_layout_key_consumable_shares(tmp_path: Path, value: object, shares: str | None) -> None:
    node = load_layout(_layout_file(tmp_path, mode="dynamic-mig", consumableShares=value)).nodes[0]
    assert node.mode == Mode("dynamic-mig", shares=shares)


@pytest.mark.parametrize("entry, message", [
    ({"consumableShares": 0}, "consumable shares '0' is not valid; valid: disabled, memory, unlimited, <N>"),
    ({"consumableShares": True}, "consumable shares 'True' is not valid"),
    ({"consumableShares": "4", "mode": "whole:shares=memory"}, "consumableShares and a mode ending :shares=memory both set the shares; give one"),
])
def test_layout_key_consumable_shares_errors_are_one_line(tmp_path: Path, entry: dict, message: str) -> None:
    with pytest.raises(LayoutError) as err:
        load_layout(_layout_file(tmp_path, **entry))
    assert message in str(err.value) and "\n" not in str(err.value)


# NVIDIA's plugin takes --consumable-shares per process: on kind each share value is a DaemonSet of its own


def test_kind_groups_nodes_by_gates_and_shares() -> None:
    layout = from_flags(["a=h100-80gb:1:whole", "b=h100-80gb:1:whole:shares=4", "c=h100-80gb:1:static-mig:all-balanced:shares=4",
                         "d=h100-80gb:1:dynamic-mig", "e=h100-80gb:1:dynamic-mig:shares=memory"])
    groups = {g.suffix: (g.modes, g.shares, g.gates) for g in plugin_groups(layout)}
    assert groups == {
        "": (("whole", "static-mig"), None, ""),
        "-shares-4": (("whole", "static-mig"), "4", "ConsumableShares=true"),
        "-dynamic-mig": (("dynamic-mig",), None, "DynamicMIG=true"),
        "-dynamic-mig-shares-memory": (("dynamic-mig",), "memory", "DynamicMIG=true,ConsumableShares=true"),
    }


def test_kind_layout_without_sharing_keeps_its_two_daemonsets() -> None:
    layout = Layout(from_flags(["a=h100-80gb:1:whole", "d=h100-80gb:1:dynamic-mig"]).nodes)
    assert [(g.suffix, g.shares) for g in plugin_groups(layout)] == [("", None), ("-dynamic-mig", None)]


def test_kind_daemonsets_select_their_nodes_and_pass_the_value() -> None:
    """Each node matches exactly one DaemonSet (the shares label in or absent), which passes its value."""
    layout = from_flags(["a=h100-80gb:1:whole", "b=h100-80gb:1:whole:shares=unlimited"])
    sets = [d for d in yaml.safe_load_all(render_manifest("img:1", layout, {})) if d and d["kind"] == "DaemonSet"]
    by_name = {d["metadata"]["name"]: d for d in sets}
    assert set(by_name) == {"dra-driver-nvidia-gpu-kubelet-plugin", "dra-driver-nvidia-gpu-kubelet-plugin-shares-unlimited"}

    def matches(daemonset: dict, labels: dict[str, str]) -> bool:
        terms = daemonset["spec"]["template"]["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        exprs = terms["nodeSelectorTerms"][0]["matchExpressions"]
        return all(labels.get(e["key"]) in e["values"] if e["operator"] == "In" else e["key"] not in labels for e in exprs)

    for node in layout.nodes:
        labels = node_object(node)["metadata"]["labels"]
        chosen = [name for name, d in by_name.items() if matches(d, labels)]
        assert len(chosen) == 1
        env = {e["name"]: e.get("value") for e in by_name[chosen[0]]["spec"]["template"]["spec"]["containers"][0]["env"]}
        assert env.get("CONSUMABLE_SHARES") == node.mode.shares
        assert ("ConsumableShares=true" in env.get("FEATURE_GATES", "")) == bool(node.mode.shares)


def test_nvidias_kind_daemonsets_split_by_health_and_take_a_users_gates() -> None:
    """Nodes with `:health` get a DaemonSet of their own with NVMLDeviceHealthCheck (NVIDIA's chart sets gates per
    deployment); a user's FEATURE_GATES joins each group's gates instead of being shadowed by them."""
    layout = from_flags(["a=h100-80gb:1:whole", "b=h100-80gb:1:whole:health", "c=h100-80gb:1:dynamic-mig"])
    groups = {g.suffix: g.gates for g in plugin_groups(layout)}
    assert groups == {"": "", "-health": "NVMLDeviceHealthCheck=true", "-dynamic-mig": "DynamicMIG=true"}, groups
    docs = [d for d in yaml.safe_load_all(render_manifest("img", layout, {"FEATURE_GATES": "TimeSlicingSettings=true"}))
            if d and d.get("kind") == "DaemonSet"]
    by_name = {d["metadata"]["name"]: d for d in docs}
    health = by_name["dra-driver-nvidia-gpu-kubelet-plugin-health"]["spec"]["template"]["spec"]
    env = {e["name"]: e.get("value") for e in health["containers"][0]["env"]}
    assert env["FEATURE_GATES"] == "NVMLDeviceHealthCheck=true,TimeSlicingSettings=true", env
    terms = health["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    assert {"key": HEALTH_LABEL, "operator": "In", "values": ["true"]} in terms["matchExpressions"], terms
    plain = by_name["dra-driver-nvidia-gpu-kubelet-plugin"]["spec"]["template"]["spec"]
    assert [e["value"] for e in plain["containers"][0]["env"] if e["name"] == "FEATURE_GATES"] == ["TimeSlicingSettings=true"]
