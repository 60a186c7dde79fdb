"""Layout parsing and the per-minor feature-gate table, checked against each release's own source."""

from __future__ import annotations

import functools
import json
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from hostenv.goenv import go_binary, go_env
from hostenv.versions import RELEASES
from testbed.clusters.features import FEATURE_GATES, RESOURCE_API_VERSIONS, feature_gates, runtime_config
from testbed.clusters.layout import LayoutError, Mode, from_flags, load_layout, parse_node_flag

LAYOUTS = Path(__file__).resolve().parents[2] / "clusters" / "layouts"


def test_node_flag_defaults_to_whole_and_parses_modes() -> None:
    assert parse_node_flag("a=h100-80gb:8").mode == Mode("whole")
    assert parse_node_flag("a=h100-80gb:2:dynamic-mig").mode == Mode("dynamic-mig")
    node = parse_node_flag("gpu-1=b200-180gb:4:static-mig:all-1g")
    assert (node.name, node.board, node.count, node.mode) == ("gpu-1", "b200-180gb", 4, Mode("static-mig", "all-1g"))


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("a", "expected NAME=BOARD:COUNT:MODE"),
        ("a=h100-80gb", "expected NAME=BOARD:COUNT:MODE"),
        ("a=h100-80gb:x", "count 'x' is not a whole number"),
        ("a=h100-80gb:0", "count 0 is out of range"),
        ("a=h100-80gb:9", "count 9 is out of range; valid: 1 to 8 GPUs per h100-80gb node"),  # HGX H100: 8
        ("a=gb200-186gb:5", "count 5 is out of range; valid: 1 to 4 GPUs per gb200-186gb node"),  # NVL72 tray: 4
        ("a=gb200-186gb:x", "count 'x' is not a whole number; valid: 1 to 4"),
        ("a=h100-80gb:1:static-mig:", "unknown mode 'static-mig:'"),
    ],
)
def test_bad_node_flags(flag: str, message: str) -> None:
    with pytest.raises(LayoutError, match=re.escape(message)):
        parse_node_flag(flag)


def test_duplicate_node_names_are_refused() -> None:
    with pytest.raises(LayoutError, match="used twice"):
        from_flags(["a=h100-80gb:1", "a=b200-180gb:1"])


def test_replicas_expand_to_numbered_nodes(tmp_path: Path) -> None:
    file = tmp_path / "l.yaml"
    file.write_text("nodes:\n  - {name: h, board: h100-80gb, count: 2, replicas: 3}\n")
    assert [n.name for n in load_layout(file).nodes] == ["h-0", "h-1", "h-2"]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("nodes: [", "is not valid YAML"),
        ("- a\n", "expected a mapping"),
        ("nodes: []\n", "'nodes' must be a non-empty list"),
        ("gpus: 1\nnodes: [{name: a, board: h100-80gb, count: 1}]\n", "unknown key 'gpus'"),
        ("nodes: [{name: a, board: h100-80gb}]\n", "missing key 'count'"),
        ("nodes: [{name: a, board: h100-80gb, count: 1, replicas: 0}]\n", "replicas 0 must be"),
        # YAML parses these but Python refuses them: a ValueError, once a traceback
        (f"nodes: [{{name: a, board: h100-80gb, count: {'9' * 5000}}}]\n", "has a value that cannot be read (Exceeds the limit"),
        ("nodes: [{name: a, board: h100-80gb, count: 2024-13-01}]\n", "has a value that cannot be read (month must be in 1..12)"),
    ],
)
def test_bad_layout_files(tmp_path: Path, text: str, message: str) -> None:
    file = tmp_path / "bad.yaml"
    file.write_text(text)
    with pytest.raises(LayoutError, match=re.escape(message)) as err:
        load_layout(file)
    assert "\n" not in str(err.value)


def test_shipped_layouts_load() -> None:
    files = sorted(LAYOUTS.glob("*.yaml"))
    assert files
    for file in files:
        assert load_layout(file).nodes


@functools.cache
def _module_dir(version: str) -> Path:
    out = subprocess.run([go_binary(), "mod", "download", "-json", f"k8s.io/kubernetes@{version}"],
                         env=go_env(), capture_output=True, text=True, cwd="/", check=True)
    return Path(json.loads(out.stdout)["Dir"])


def _kube_features_source(version: str) -> str:
    return (_module_dir(version) / "pkg" / "features" / "kube_features.go").read_text()


def _gate_specs(source: str, gate: str) -> list[dict[str, bool]]:
    """Default and LockToDefault of each versioned spec of `gate` in kube_features.go (empty: no such gate)."""
    match = re.search(rf"^\t{gate}: \{{\n(.*?)^\t\}},", source, re.M | re.S)
    specs = []
    for line in match.group(1).splitlines() if match else []:
        code = line.split("//", 1)[0]  # comments mention future defaults
        default = re.search(r"(?<!LockTo)Default: (true|false)", code)
        if default:
            locked = re.search(r"LockToDefault: (true|false)", code)
            specs.append({"default": default.group(1) == "true", "locked": bool(locked) and locked.group(1) == "true"})
    return specs


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_every_gate_we_set_exists_and_is_not_locked_in_that_release(minor: str) -> None:
    source = _kube_features_source(RELEASES[minor].kubernetes)
    for gate in feature_gates(minor):
        specs = _gate_specs(source, gate)
        assert specs, f"{gate} does not exist in {RELEASES[minor].kubernetes}: the component would refuse to start"
        assert not specs[-1]["locked"], f"{gate} is locked in {minor}; setting it is pointless"


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_alpha_dra_gates_of_each_release_are_switched_on(minor: str) -> None:
    source = _kube_features_source(RELEASES[minor].kubernetes)
    wanted = ("DRAPartitionableDevices", "DRADeviceTaints", "DRAConsumableCapacity", "DRAExtendedResource")
    for gate in wanted:
        specs = _gate_specs(source, gate)
        if specs and not specs[-1]["default"]:
            assert gate in FEATURE_GATES[minor], f"{gate} is off by default in {minor} but not switched on"


def test_runtime_config_serves_every_resource_version() -> None:
    assert runtime_config("1.34") == {f"resource.k8s.io/{v}": True for v in RESOURCE_API_VERSIONS}


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_gates_the_release_dra_e2e_specs_name_are_switched_on(minor: str) -> None:
    """Every gate a spec of the release's test/e2e/dra names that is off by default there is on in our beds."""
    source = _kube_features_source(RELEASES[minor].kubernetes)
    named = set()
    for file in sorted((_module_dir(RELEASES[minor].kubernetes) / "test" / "e2e" / "dra").glob("*.go")):
        named |= set(re.findall(r"WithFeatureGate\(features\.(\w+)\)", file.read_text()))
    assert named, f"no WithFeatureGate in {minor}'s test/e2e/dra (layout changed?)"
    off = sorted(gate for gate in named if (specs := _gate_specs(source, gate)) and not specs[-1]["default"])
    missing = [gate for gate in off if gate not in feature_gates(minor)]
    assert not missing, f"{minor}'s DRA e2e specs need {missing}, off by default there and not switched on"


def _kind_runtime_config(kind_yaml: str) -> set[str]:
    """The API versions upstream's test/e2e/dra/kind.yaml serves: top-level runtimeConfig (1.36+) or the
    apiserver's runtime-config flag in a kubeadm patch (1.34, 1.35)."""
    config = yaml.safe_load(kind_yaml)
    found = {key for key, on in (config.get("runtimeConfig") or {}).items() if str(on).lower() == "true"}
    for flag in re.findall(r'runtime-config:\s*"([^"]+)"', kind_yaml):
        found |= {entry.split("=")[0] for entry in flag.split(",") if entry.endswith("=true")}
    return found


@pytest.mark.parametrize("minor", sorted(RELEASES))
def test_runtime_config_serves_what_the_release_dra_e2e_kind_config_serves(minor: str) -> None:
    wanted = _kind_runtime_config((_module_dir(RELEASES[minor].kubernetes) / "test" / "e2e" / "dra" / "kind.yaml").read_text())
    assert wanted, f"{minor}'s test/e2e/dra/kind.yaml serves no extra API versions (layout changed?)"
    missing = sorted(wanted - set(runtime_config(minor)))
    assert not missing, f"{minor}'s DRA e2e kind config serves {missing}; our beds do not"
