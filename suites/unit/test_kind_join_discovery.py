"""The kind cluster's own CA, bootstrap token and discovery file (testbed/clusters/kind/join_discovery.py),
and how the rendered kind config carries them."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import yaml
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from testbed.clusters.features import feature_gates, runtime_config
from testbed.clusters.kind.join_discovery import DISCOVERY_IN_NODE, PKI_IN_NODE, bootstrap_token, prepare
from testbed.templates import render_template


def test_the_ca_is_a_ca_whose_key_matches_it_and_stays_private(tmp_path: Path) -> None:
    join = prepare(tmp_path, "bed")
    cert = x509.load_pem_x509_certificate(join.ca_cert.read_bytes())
    key = serialization.load_pem_private_key(join.ca_key.read_bytes(), password=None)
    # kubeadm refuses an existing CA that is not one, or whose key does not match
    assert cert.extensions.get_extension_for_class(x509.BasicConstraints).value.ca is True
    assert cert.extensions.get_extension_for_class(x509.KeyUsage).value.key_cert_sign is True
    assert cert.public_key().public_numbers() == key.public_key().public_numbers()
    assert cert.subject.rfc4514_string() == "CN=kubernetes"
    assert join.ca_key.stat().st_mode & 0o077 == 0


def test_the_discovery_file_names_the_control_plane_and_its_ca_and_carries_no_credentials(tmp_path: Path) -> None:
    join = prepare(tmp_path, "bed")
    config = yaml.safe_load(join.kubeconfig.read_text())
    cluster = config["clusters"][0]["cluster"]
    assert cluster["server"] == "https://bed-control-plane:6443"
    assert base64.b64decode(cluster["certificate-authority-data"]) == join.ca_cert.read_bytes()
    assert config["users"][0]["user"] == {}  # kubeadm then authenticates the join with the bootstrap token


def test_tokens_have_kubeadms_format_and_differ() -> None:
    tokens = {bootstrap_token() for _ in range(20)}
    assert len(tokens) == 20
    assert all(re.fullmatch(r"[a-z0-9]{6}\.[a-z0-9]{16}", t) for t in tokens)


def test_the_kind_config_mounts_the_ca_on_the_control_plane_and_the_file_on_workers(tmp_path: Path) -> None:
    join = prepare(tmp_path, "bed")
    nodes = [{"role": "control-plane", "labels": {}, "mounts": [vars(m) for m in join.control_plane_mounts()],
              "image": "node:1"},
             {"role": "worker", "labels": {}, "mounts": [vars(m) for m in join.worker_mounts()], "image": "worker:1"}]
    text = render_template("kind.yaml.j2", cluster_name="bed", feature_gates=feature_gates("1.34"), runtime_config=runtime_config("1.34"),
                           apiserver_port=None, pod_subnet="10.244.0.0/16", nodes=nodes, restart_backoff_max=None,
                           join_patches=join.kubeadm_patches())
    config = yaml.safe_load(text)
    patches = {p["kind"]: p for p in map(yaml.safe_load, config["kubeadmConfigPatches"])}
    # a merge patch: null drops kind's token discovery (kubeadm refuses both kinds at once)
    assert patches["JoinConfiguration"]["discovery"] == {"bootstrapToken": None, "tlsBootstrapToken": join.token,
                                                         "file": {"kubeConfigPath": DISCOVERY_IN_NODE}}
    assert patches["InitConfiguration"]["bootstrapTokens"] == [{"token": join.token}]
    control_plane, worker = config["nodes"]
    assert {m["containerPath"] for m in control_plane["extraMounts"]} == {f"{PKI_IN_NODE}/ca.crt", f"{PKI_IN_NODE}/ca.key"}
    assert [m["containerPath"] for m in worker["extraMounts"]] == [DISCOVERY_IN_NODE]
    assert (control_plane["image"], worker["image"]) == ("node:1", "worker:1")
