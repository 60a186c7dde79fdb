"""The driver's deploy while kind still joins the workers (testbed/clusters/kind/early_deploy.py), with the
node and Docker calls stood in for; the API server probe against a real local HTTPS server."""

from __future__ import annotations

import http.server
import ssl
import threading
import time
from pathlib import Path

import pytest
import yaml

from testbed.clusters.kind import early_deploy
from testbed.clusters.kind.early_deploy import EarlyDeploy, api_server_ready, host_kubeconfig
from testbed.clusters.kind.join_discovery import make_ca

ADMIN_CONF = yaml.safe_dump({"apiVersion": "v1", "kind": "Config", "current-context": "admin",
                             "clusters": [{"name": "kind", "cluster": {"server": "https://bed-control-plane:6443",
                                                                       "certificate-authority-data": "Q0E="}}],
                             "contexts": [{"name": "admin", "context": {"cluster": "kind", "user": "admin"}}],
                             "users": [{"name": "admin", "user": {"token": "t"}}]})


@pytest.fixture
def api(monkeypatch):
    """A stand-in control plane: `ready` says whether its API server answers."""
    state = {"ready": False}
    monkeypatch.setattr(early_deploy, "POLL_SECONDS", 0.02)
    monkeypatch.setattr(early_deploy, "published_endpoint", lambda node: "127.0.0.1:40000")
    monkeypatch.setattr(early_deploy, "api_server_ready", lambda endpoint: state["ready"])
    monkeypatch.setattr(early_deploy, "read_admin_conf", lambda node: ADMIN_CONF)
    return state


def test_it_prepares_the_nodes_once_and_applies_through_the_host_port_until_it_succeeds(api, tmp_path: Path) -> None:
    calls: list[str] = []
    failures = {"apply": 2}  # an API server refusing requests for a while after it answers /readyz
    seen: dict = {}

    def prepare() -> None:
        calls.append("prepare")

    def apply(kubeconfig: Path) -> None:
        calls.append("apply")
        if failures["apply"]:
            failures["apply"] -= 1
            raise RuntimeError("forbidden: not yet")
        seen["kubeconfig"] = yaml.safe_load(kubeconfig.read_text())

    api["ready"] = True
    job = EarlyDeploy("bed-control-plane", tmp_path / "kubeconfig.early", [], prepare, apply)
    _until(lambda: job.applied)
    job.finish()
    assert job.applied and job.nodes_prepared
    assert calls == ["prepare", "apply", "apply", "apply"]  # the nodes are prepared once
    assert seen["kubeconfig"]["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:40000"
    assert (tmp_path / "kubeconfig.early").stat().st_mode & 0o077 == 0


def test_each_worker_is_unpacked_once_it_boots_and_the_apply_does_not_wait_for_it(api, tmp_path: Path) -> None:
    booted = {"w1": False, "w2": False}
    unpacked: list[str] = []

    def unpacker(worker: str):
        def unpack() -> None:
            if not booted[worker]:
                raise RuntimeError(f"{worker}: containerd does not answer")
            unpacked.append(worker)
        return unpack

    api["ready"] = True
    applied: list[Path] = []
    job = EarlyDeploy("bed-control-plane", tmp_path / "kubeconfig.early", [unpacker("w1"), unpacker("w2")], lambda: None, applied.append)
    _until(lambda: job.applied)
    assert unpacked == [] and job.unpacked == 0  # applied while neither worker had booted
    booted["w2"] = True
    _until(lambda: job.unpacked == 1)
    booted["w1"] = True
    _until(lambda: job.unpacked == 2)
    job.finish()
    assert sorted(unpacked) == ["w1", "w2"] and len(applied) == 1


def _until(condition, timeout: float = 10.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.02)


def test_finish_stops_it_promptly_while_nothing_answers(api, tmp_path: Path) -> None:
    applied: list[Path] = []

    def never() -> None:
        raise RuntimeError("containerd does not answer")

    job = EarlyDeploy("bed-control-plane", tmp_path / "kubeconfig.early", [never], lambda: None, applied.append)
    time.sleep(0.2)
    started = time.monotonic()
    job.finish()
    assert time.monotonic() - started < 1
    assert not job.applied and applied == [] and job.unpacked == 0
    assert not (tmp_path / "kubeconfig.early").exists()


def test_unpacking_gives_up_after_its_tries(api, monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setattr(early_deploy, "UNPACK_TRIES", 3)
    tries: list[int] = []

    def never() -> None:
        tries.append(1)
        raise RuntimeError("containerd does not answer")

    job = EarlyDeploy("bed-control-plane", tmp_path / "kubeconfig.early", [never], lambda: None, lambda kubeconfig: None)
    time.sleep(0.5)
    job.finish()
    assert len(tries) == 3


def test_the_host_kubeconfig_keeps_the_credentials_and_changes_only_the_server() -> None:
    config = yaml.safe_load(host_kubeconfig(ADMIN_CONF, "127.0.0.1:41234"))
    original = yaml.safe_load(ADMIN_CONF)
    assert config["clusters"][0]["cluster"]["server"] == "https://127.0.0.1:41234"
    assert config["users"] == original["users"]
    assert config["clusters"][0]["cluster"]["certificate-authority-data"] == "Q0E="


def _https_server(tmp_path: Path, status: int) -> http.server.HTTPServer:
    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - http.server's name
            self.send_response(status if self.path == "/readyz" else 404)
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args) -> None:
            pass

    make_ca(tmp_path / "tls.crt", tmp_path / "tls.key")
    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "tls.crt", tmp_path / "tls.key")
    server.socket = context.wrap_socket(server.socket, server_side=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


@pytest.mark.parametrize("status, ready", [(200, True), (500, False)])
def test_the_api_server_probe_asks_readyz_over_tls(tmp_path: Path, status: int, ready: bool) -> None:
    server = _https_server(tmp_path, status)
    try:
        assert api_server_ready(f"127.0.0.1:{server.server_address[1]}") is ready
    finally:
        server.shutdown()
        server.server_close()


def test_the_api_server_probe_says_no_for_a_closed_port(tmp_path: Path) -> None:
    server = _https_server(tmp_path, 200)
    port = server.server_address[1]
    server.shutdown()
    server.server_close()
    assert api_server_ready(f"127.0.0.1:{port}") is False
