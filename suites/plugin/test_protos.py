"""The kubelet API stubs: generated from the k8s.io/kubelet module into the cache, never into the repository."""

from __future__ import annotations

import subprocess

from conftest import REPO
from fake_gpus.driver.kubeletplugin.protos import PROTO_FILES, ensure_protos, kubelet_module_dir, load, strip_gogo, version_for
from hostenv.dirs import cache_root


def test_stubs_live_in_the_cache_under_the_module_version() -> None:
    version = version_for("1.34")
    assert version == "v0.34.4"
    assert ensure_protos(version) == cache_root() / "protos" / version / "py"


def test_services_carry_the_names_the_kubelet_calls() -> None:
    p = load("1.34")
    names = {p.dra_v1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name,
             p.dra_v1beta1.DESCRIPTOR.services_by_name["DRAPlugin"].full_name,
             p.health.DESCRIPTOR.services_by_name["DRAResourceHealth"].full_name,
             p.registration.DESCRIPTOR.services_by_name["Registration"].full_name}
    assert names == {"k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin", "k8s.io.kubelet.pkg.apis.dra.v1beta1.DRAPlugin",
                     "v1alpha1.DRAResourceHealth", "pluginregistration.Registration"}
    # gogoproto's customname only renames Go fields: the wire and Python names stay the .proto's
    assert [f.name for f in p.dra_v1.Device.DESCRIPTOR.fields] == ["request_names", "pool_name", "device_name", "cdi_device_ids"]


def test_gogo_options_are_stripped_and_nothing_else() -> None:
    module = kubelet_module_dir(version_for("1.34"))
    original = (module / PROTO_FILES["dra_v1"]).read_text()
    stripped = strip_gogo(original)
    assert "gogoproto" in original and "gogoproto" not in stripped
    kept = [line for line in original.splitlines() if "gogoproto" not in line]
    assert [l for l in kept if "message " in l or "rpc " in l] == [l for l in stripped.splitlines() if "message " in l or "rpc " in l]


def test_no_proto_or_generated_file_is_committed() -> None:
    tracked = subprocess.run(["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True).stdout.split()
    assert [f for f in tracked if f.endswith((".proto", "_pb2.py", "_pb2_grpc.py"))] == []
