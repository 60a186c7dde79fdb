"""The cluster interface without a cluster: the driver seam, spec records for --reuse-cluster, the backend list."""

from __future__ import annotations

import subprocess
import sys
import uuid

import pytest

from fake_gpus.driver.faults import fault_env
from testbed.clusters.base import ClusterSpec, spec_mismatch, spec_record
from testbed.clusters.driver import DriverSpec, DriverSpecError, parse_driver
from testbed.clusters.kind.driver import kind_driver
from testbed.clusters.kwok.driver import kwok_driver
from testbed.clusters.layout import from_flags
from testbed.clusters.registry import BACKENDS, backend_class, cluster_for

LAYOUT = from_flags(["n0=h100-80gb:1:whole"])


def test_driver_spec_names_what_each_kind_needs(tmp_path) -> None:
    with pytest.raises(DriverSpecError, match="valid: ours, binary, image"):
        DriverSpec("vendor")
    with pytest.raises(DriverSpecError, match="needs the path"):
        DriverSpec("binary")
    with pytest.raises(DriverSpecError, match="needs an image"):
        DriverSpec("image")
    with pytest.raises(DriverSpecError, match="only a driver of kind 'binary' takes a path"):
        DriverSpec("ours", path="/bin/true")
    plugin = tmp_path / "gpu-kubelet-plugin"
    plugin.write_text("#!/bin/sh\n")
    assert parse_driver(f"binary:{plugin}").path == str(plugin)
    assert parse_driver("image:vendor/plugin:v1").image == "vendor/plugin:v1"
    assert parse_driver("ours", "gpu.example.com").process_env() == {"DRA_TESTBED_DRIVER_NAME": "gpu.example.com"}
    with pytest.raises(DriverSpecError, match="is not a file"):
        parse_driver(f"binary:{tmp_path / 'missing'}")


@pytest.mark.parametrize("choose", [kwok_driver, kind_driver])
def test_backends_refuse_driver_kinds_they_cannot_run_in_one_line(choose, tmp_path) -> None:
    assert choose(DriverSpec()).spec.kind == "ours"
    plugin = tmp_path / "plugin"
    plugin.write_text("")
    # KWOK runs a kubelet-plugin binary as a process per node (testbed/drivers/nvidia); kind runs a binary or an
    # image as NVIDIA's chart deploys it (testbed/drivers/nvidia/kind.py)
    assert choose(DriverSpec("binary", path=str(plugin))).spec.kind == "binary"
    unsupported = [DriverSpec("image", image="vendor/plugin:v1")] if choose is kwok_driver else []
    if choose is kind_driver:
        assert choose(DriverSpec("image", image="vendor/plugin:v1")).spec.kind == "image"
    for driver in unsupported:
        with pytest.raises(DriverSpecError) as refused:
            choose(driver)
        assert "\n" not in str(refused.value) and f"kind {driver.kind!r}" in str(refused.value) and "valid here: ours" in str(refused.value)


def test_up_with_an_unsupported_driver_exits_2_before_anything_starts(tmp_path) -> None:
    name = f"drvseam-{uuid.uuid4().hex[:6]}"
    plugin = tmp_path / "plugin"
    plugin.write_text("")
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "up", "--name", name, "--node", "n=h100-80gb:1:whole",
                          "--driver", "image:vendor/plugin:v1"], capture_output=True, text=True, timeout=120)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().count("\n") == 0 and "kwok backend cannot run a driver of kind 'image'" in out.stderr
    assert not cluster_for("kwok", name).exists()


def test_every_backend_implements_the_whole_interface() -> None:
    assert BACKENDS == ("kwok", "kind")
    for backend in BACKENDS:
        cluster = backend_class(backend)("iface")  # abstract methods left out would make this raise
        assert cluster.backend == backend
    assert cluster_for("existing", "x", "/nonexistent").backend == "existing"
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "status", "--backend", "nope"], capture_output=True, text=True, timeout=60)
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
