"""The chart renders, lints and refuses bad values (helm built from its Go module, offline); no cluster."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from fake_gpus.catalog import BOARD_KEYS
from fake_gpus.machine.provision import node_labels
from testbed.clusters.layout import load_layout
from testbed.install.release import CHART, render
from testbed.toolchain.renderers import ensure_renderer

LAYOUT = Path(__file__).resolve().parents[2] / "clusters" / "layouts" / "mixed-h100-b200.yaml"


def _helm(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(ensure_renderer("helm")), *args], capture_output=True, text=True)


def test_chart_lints() -> None:
    out = _helm("lint", str(CHART), "--strict")
    assert out.returncode == 0, out.stdout + out.stderr


def test_rendered_nodes_carry_the_layouts_labels_and_taint() -> None:
    layout = load_layout(LAYOUT)
    objects = [o for o in yaml.safe_load_all(render(layout, "r1", "ns1")) if o]
    nodes = {o["metadata"]["name"]: o for o in objects if o["kind"] == "Node"}
    assert sorted(nodes) == sorted(n.name for n in layout.nodes)
    for spec in layout.nodes:
        node = nodes[spec.name]
        assert node_labels(spec.hardware).items() <= node["metadata"]["labels"].items()
        assert node["metadata"]["labels"]["dra-fake-gpus.io/release"] == "r1"
        assert node["spec"]["taints"] == [{"key": "dra-testbed.io/fake-node", "value": "true", "effect": "NoSchedule"}]
    layout_cm = next(o for o in objects if o["kind"] == "ConfigMap" and o["metadata"]["name"] == "r1-layout")
    assert [n["name"] for n in yaml.safe_load(layout_cm["data"]["layout.yaml"])["nodes"]] == [n.name for n in layout.nodes]
    assert {o["metadata"]["name"] for o in objects if o["kind"] == "DeviceClass"} == {"gpu.nvidia.com", "mig.nvidia.com"}


def test_device_classes_can_be_left_out() -> None:
    objects = [o for o in yaml.safe_load_all(render(load_layout(LAYOUT), "r1", "ns1", device_classes=False)) if o]
    assert not [o for o in objects if o["kind"] == "DeviceClass"]
    config = json.loads(next(o for o in objects if o["metadata"]["name"] == "r1-publisher" and o["kind"] == "ConfigMap")["data"]["config.json"])
    assert config["device_classes"] is False  # nor does the publisher make them


@pytest.mark.parametrize("bad, names", [
    ('nodes=[{"name":"n0","labels":{"dra-testbed.io/board":"h900-1gb","dra-testbed.io/gpu-count":"1"}}]', "dra-testbed.io~1board': value must be one of"),
    ('nodeTaints=[{"key":"k","effect":"Sometimes"}]', "effect"),
    ('deviceClasses={"create":"yes"}', "create"),
])
def test_schema_refuses_a_bad_value(bad: str, names: str) -> None:
    out = _helm("template", "r1", str(CHART), "--set-json", bad)
    assert out.returncode != 0
    assert names in out.stderr, out.stderr


def test_schema_boards_are_the_catalogs() -> None:
    schema = json.loads((CHART / "values.schema.json").read_text())
    board = schema["properties"]["nodes"]["items"]["properties"]["labels"]["properties"]["dra-testbed.io/board"]
    assert board["enum"] == list(BOARD_KEYS)


def test_readme_is_generated_from_values() -> None:
    from testbed.install.readme import chart_readme

    assert (CHART / "README.md").read_text() == chart_readme(CHART), "regenerate: python -m testbed.install.readme"


def test_values_point_the_deployments_at_the_images_built_offline() -> None:
    """The images `fleet_images` builds for clusters that pull nothing (kind): the Deployments run them, and the
    publisher's config names the fake NVML folder where the driver image carries it."""
    from testbed.clusters.kind.images.driver_image import NVML_IN_IMAGE

    objects = [o for o in yaml.safe_load_all(render(load_layout(LAYOUT), "r1", "ns1", image="dra-testbed/driver:abc",
                                                    kwok_image="dra-testbed/kwok:v0.8.0-def")) if o]
    images = {o["metadata"]["name"]: o["spec"]["template"]["spec"]["containers"][0]["image"] for o in objects if o["kind"] == "Deployment"}
    assert images == {"r1-publisher": "dra-testbed/driver:abc", "r1-kwok": "dra-testbed/kwok:v0.8.0-def"}
    config = json.loads(next(o for o in objects if o["metadata"]["name"] == "r1-publisher" and o["kind"] == "ConfigMap")["data"]["config.json"])
    assert config["nvml_lib_dir"] == NVML_IN_IMAGE
    kwok = next(o for o in objects if o["kind"] == "Deployment" and o["metadata"]["name"] == "r1-kwok")
    assert "--manage-nodes-with-label-selector=dra-fake-gpus.io/release=r1" in kwok["spec"]["template"]["spec"]["containers"][0]["args"]
