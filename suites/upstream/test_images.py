"""The images the upstream DRA suite runs: references as compiled into e2e.test, our proxy program's
protocol (what test/e2e/dra/utils/deploy.go drives through exec and port-forward), and the commands
the tests exec inside busybox."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from pathlib import Path

import pytest

from hostenv.versions import release_for
from testbed.upstream import images


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _wait_for(path: Path, proc: subprocess.Popen, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not path.exists():
        assert proc.poll() is None, proc.stderr.read() if proc.stderr else "proxy exited"
        assert time.monotonic() < deadline, f"{path} never appeared"
        time.sleep(0.05)


@pytest.fixture
def proxy(tmp_path: Path):
    """Our /hostpathplugin in proxy mode on a Unix socket (a stale file there first) and a loopback port."""
    sock = tmp_path / "plugins" / "dra.sock"
    sock.parent.mkdir()
    sock.write_text("left by an earlier run")
    port = _free_port()
    proc = subprocess.Popen([str(images.proxy_binary()), "--v=5", f"--endpoint={sock}", f"--proxy-endpoint=tcp://127.0.0.1:{port}"],
                            stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 20
    while sock.is_file() and not sock.is_socket():
        assert proc.poll() is None and time.monotonic() < deadline, "proxy did not replace the stale socket file"
        time.sleep(0.05)
    _wait_for(sock, proc)
    yield sock, port, proc
    proc.terminate()
    proc.wait(timeout=10)


def _unix(path: Path) -> socket.socket:
    conn = socket.socket(socket.AF_UNIX)
    conn.settimeout(10)
    conn.connect(str(path))
    return conn


def _tcp(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=10)
    conn.settimeout(10)
    return conn


def test_proxy_pairs_kubelet_connection_with_an_idle_e2e_connection(proxy) -> None:
    sock, port, _ = proxy
    dead = _tcp(port)
    dead.close()  # e2e.test closed this one before any kubelet came: it must not be paired
    e2e = _tcp(port)
    e2e.sendall(b"server settings first")  # the gRPC server speaks before the kubelet's connection exists
    time.sleep(0.3)
    kubelet = _unix(sock)
    assert kubelet.recv(100) == b"server settings first"
    kubelet.sendall(b"request")
    assert e2e.recv(100) == b"request"
    e2e.close()
    assert kubelet.recv(100) == b"", "the kubelet side must see the end of its e2e.test connection"
    kubelet.close()


def test_proxy_waits_for_e2e_and_serves_several_connections(proxy) -> None:
    sock, port, _ = proxy
    first = _unix(sock)  # before e2e.test has a connection open: held, not refused
    e2e_a, e2e_b = _tcp(port), _tcp(port)
    second = _unix(sock)
    first.sendall(b"a")
    second.sendall(b"b")
    got = {e2e_a.recv(10), e2e_b.recv(10)}
    assert got == {b"a", b"b"}
    for conn in (first, second, e2e_a, e2e_b):
        conn.close()


def test_proxy_removes_its_socket_on_sigterm(proxy) -> None:
    sock, _, proc = proxy
    proc.terminate()
    assert proc.wait(timeout=10) == 0
    assert not sock.exists()


@pytest.mark.parametrize("args", [[], ["--endpoint=/tmp/x.sock"], ["--endpoint=/tmp/x.sock", "--proxy-endpoint=:99"]])
def test_proxy_bad_command_line_exits_nonzero_with_one_line(args: list[str]) -> None:
    out = subprocess.run([str(images.proxy_binary()), *args], capture_output=True, text=True, timeout=30)
    assert out.returncode != 0
    assert out.stderr.strip() and "--" in out.stderr


def test_references_are_the_ones_compiled_into_e2e_test() -> None:
    """The manifest images appear verbatim in e2e.test (manifests are embedded); the others are read
    from test/utils/image exactly as GetE2EImage joins them."""
    from testbed.upstream.binary import ensure_e2e

    release = release_for("1.34")
    refs = images.references(images.module_dir(release))
    data = ensure_e2e("1.34").read_bytes()
    for ref in (refs.proxy, refs.sample_device_plugin):
        assert ref.encode() in data, ref
    assert refs.busybox == "registry.k8s.io/e2e-test-images/busybox:1.37.0-1"
    assert refs.pause == "registry.k8s.io/pause:3.10.1"


def test_manifest_parsing_refuses_a_missing_image() -> None:
    with pytest.raises(images.ImageBuildError, match="no default image for BusyBox"):
        images.manifest_references('GcRegistry: "registry.k8s.io",\nconfigs[Pause] = Config{list.GcRegistry, "pause", "3.10.1"}\n')
    with pytest.raises(images.ImageBuildError, match="expected one image"):
        images.yaml_image("containers:\n- image: a:1\n- image: b:2\n", "x.yaml")


@pytest.mark.kind
def test_busybox_image_offers_what_the_tests_exec() -> None:
    """The shell lines the DRA tests and the proxy's file IO run, inside our busybox and proxy images."""
    from testbed.host.docker.dockerd import docker

    refs = images.ensure_images("1.34")
    script = ("env | grep -q PATH= && echo aGkK | base64 -d && mkdir /tmp/d && mv /tmp/d /tmp/e && rm -rf /tmp/e "
              "&& if ! [ -e /tmp/e ]; then echo notexist; fi && true && sleep 0 && cat <<EOF\nheredoc\nEOF")
    for ref in (refs.busybox, refs.proxy):
        out = docker("run", "--rm", "--pull", "never", ref, "sh", "-c", script)
        assert out.stdout.split() == ["hi", "notexist", "heredoc"], ref
    out = docker("run", "--rm", "--pull", "never", "--entrypoint", "/hostpathplugin", refs.proxy, check=False)
    assert out.returncode == 2 and "proxy mode" in out.stderr


def _git(repo: Path, *args: str) -> str:
    env = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t", "PATH": "/usr/bin:/bin"}
    return subprocess.run(["git", *args], cwd=repo, env=env, capture_output=True, text=True, check=True).stdout.strip()


def test_nvidia_plugin_is_built_from_the_pinned_commit_not_the_tip(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CI builder fetches exactly the pinned commit (a later commit on the branch must not leak in),
    builds ./cmd/gpu-kubelet-plugin from the repository's vendor mode, and serves the cached binary after."""
    from testbed.drivers.nvidia import build

    repo = tmp_path / "repo"
    (repo / "cmd" / "gpu-kubelet-plugin").mkdir(parents=True)
    (repo / "go.mod").write_text("module example.com/fakeplugin\n\ngo 1.22\n")
    main = repo / "cmd" / "gpu-kubelet-plugin" / "main.go"
    _git(repo, "init", "-q")
    for version in ("pinned", "later"):
        main.write_text(f'package main\n\nimport "fmt"\n\nfunc main() {{ fmt.Println("{version}") }}\n')
        _git(repo, "add", "-A")
        _git(repo, "commit", "-q", "-m", version)
        if version == "pinned":
            pinned = _git(repo, "rev-parse", "HEAD")
    monkeypatch.setattr(build, "cached_path", lambda commit: tmp_path / "cache" / commit / build.BINARY)
    binary = build.build_plugin(repo=str(repo), commit=pinned)
    assert subprocess.run([str(binary)], capture_output=True, text=True).stdout.strip() == "pinned"
    shutil.rmtree(repo)
    assert build.build_plugin(repo=str(repo), commit=pinned) == binary  # cached: no fetch
    assert not list(binary.parent.glob(".src-*")), "the fetched source must not stay in the cache"
    with pytest.raises(build.BuildError):
        build.build_plugin(repo=str(tmp_path / "nowhere"), commit="0" * 40)
