"""The cluster interface without a cluster: the driver seam, spec records for --reuse-cluster, the backend list."""

from __future__ import annotations

import sys
import uuid

import pytest

from fake_gpus.driver.faults import fault_env
from hostenv.processes import run_child
from testbed.clusters.base import ClusterSpec, spec_mismatch, spec_record
from testbed.clusters.driver import DriverSpec, DriverSpecError, parse_driver
from testbed.clusters.kind.driver import kind_driver
from testbed.clusters.kwok.driver import kwok_driver
from testbed.clusters.layout import from_flags
from testbed.clusters.registry import BACKENDS, backend_class, cluster_for

LAYOUT = from_flags(["n0=h100-80gb:1:whole"])


def test_driver_spec_names_what_each_way_needs(tmp_path) -> None:
    with pytest.raises(DriverSpecError, match="unknown driver 'vendor'; valid: ours, nvidia"):
        DriverSpec("vendor").implementation("kwok")
    with pytest.raises(DriverSpecError, match="needs the path"):
        DriverSpec("nvidia", path="")
    with pytest.raises(DriverSpecError, match="needs an image"):
        DriverSpec("nvidia", image=" ")
    with pytest.raises(DriverSpecError, match="either a binary or an image"):
        DriverSpec("nvidia", path="/bin/true", image="vendor/plugin:v1")
    plugin = tmp_path / "gpu-kubelet-plugin"
    plugin.write_text("#!/bin/sh\n")
    plugin.chmod(0o755)
    assert parse_driver("nvidia", binary=str(plugin)).path == str(plugin)
    assert parse_driver("nvidia", image="vendor/plugin:v1").image == "vendor/plugin:v1"
    assert parse_driver("ours", "gpu.example.com").process_env() == {"DRA_TESTBED_DRIVER_NAME": "gpu.example.com"}
    with pytest.raises(DriverSpecError, match="is not an executable file"):
        parse_driver("nvidia", binary=str(tmp_path / "missing"))
    with pytest.raises(DriverSpecError, match="--driver-binary does not go with driver 'ours'; it goes with: nvidia"):
        parse_driver("ours", binary=str(plugin))


@pytest.mark.parametrize("choose", [kwok_driver, kind_driver])
def test_backends_refuse_drivers_they_cannot_run_in_one_line(choose, tmp_path) -> None:
    assert choose(DriverSpec()).spec.way == "ours"
    plugin = tmp_path / "plugin"
    plugin.write_text("")
    # KWOK runs a kubelet-plugin binary as a process per node (testbed/drivers/nvidia/kwok.py); kind runs a binary or
    # an image as NVIDIA's chart deploys it (testbed/drivers/nvidia/kind.py)
    assert choose(DriverSpec("nvidia", path=str(plugin))).spec.way == "binary"
    unsupported = [DriverSpec("nvidia", image="vendor/plugin:v1")] if choose is kwok_driver else []
    if choose is kind_driver:
        assert choose(DriverSpec("nvidia", image="vendor/plugin:v1")).spec.way == "image"
    for driver in unsupported:
        with pytest.raises(DriverSpecError) as refused:
            choose(driver)
        assert "\n" not in str(refused.value) and "driver 'nvidia' from 'image'" in str(refused.value) and "valid here: binary" in str(refused.value)


def test_up_with_an_unsupported_driver_exits_2_before_anything_starts(tmp_path) -> None:
    name = f"drvseam-{uuid.uuid4().hex[:6]}"
    plugin = tmp_path / "plugin"
    plugin.write_text("")
    out = run_child([sys.executable, "-m", "testbed.cli", "up", "--name", name, "--node", "n=h100-80gb:1:whole",
                     "--driver", "nvidia", "--driver-image", "vendor/plugin:v1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "kwok backend cannot run driver 'nvidia' from 'image'" in out.stderr
    assert not cluster_for("kwok", name).exists()


def test_every_backend_implements_the_whole_interface() -> None:
    assert BACKENDS == ("kwok", "kind")
    for backend in BACKENDS:
        cluster = backend_class(backend)("iface")  # abstract methods left out would make this raise
        assert cluster.backend == backend
    assert cluster_for("existing", "x", "/nonexistent").backend == "existing"
    out = run_child([sys.executable, "-m", "testbed.cli", "status", "--backend", "nope"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2 and "'kwok', 'kind'" in out.stderr


def test_reuse_compares_minor_layout_and_driver_with_its_faults() -> None:
    spec = ClusterSpec(name="a", k8s="1.34", layout=LAYOUT)
    saved = {"backend": "kwok", "name": "a", **spec_record(spec)}
    assert spec_mismatch(saved, ClusterSpec(name="a", k8s="v1.34", layout=LAYOUT)) is None
    assert "its k8s differs" in spec_mismatch(saved, ClusterSpec(name="a", k8s="1.35", layout=LAYOUT))
    assert "its layout differs" in spec_mismatch(saved, ClusterSpec(name="a", layout=from_flags(["n0=h100-80gb:2:whole"])))
    faulty = ClusterSpec(name="a", layout=LAYOUT, driver=DriverSpec(env=fault_env(["wrong-memory"])))
    assert "its driver differs" in spec_mismatch(saved, faulty) and "wrong-memory" in spec_mismatch(saved, faulty)
    assert spec_mismatch(None, spec) == "it has no recorded spec"


def test_a_spec_recorded_before_the_driver_registry_reads_back_as_its_driver() -> None:
    # spec.json of a bed kept from before drivers were registered: "kind" ours | binary | image (NVIDIA's)
    assert DriverSpec.from_dict({"kind": "ours", "name": "gpu.nvidia.com"}).driver == "ours"
    assert DriverSpec.from_dict({"kind": "binary", "path": "/p", "name": "gpu.nvidia.com"}) == DriverSpec("nvidia", "gpu.nvidia.com", path="/p")
    assert DriverSpec.from_dict({"kind": "image", "image": "r/i:1", "name": "gpu.nvidia.com"}).way == "image"
    assert DriverSpec.from_dict(DriverSpec("nvidia", path="/p").as_dict()) == DriverSpec("nvidia", path="/p")
