"""Toolchain resolution without network: override, cache, download from a local mirror, Go build."""

from __future__ import annotations

import collections
import functools
import http.server
import json
import subprocess
import sys
import threading
from pathlib import Path
from typing import Iterator

import pytest

from hostenv.versions import UnknownVersionError, release_for
from testbed.toolchain import download, gobuild
from testbed.toolchain.mirror import write_mirror
from testbed.toolchain.projects import PROJECTS
from testbed.toolchain.resolve import ToolchainError, ensure, ensure_project
from testbed.toolchain.store import CachedRelease, sha256_of

RELEASE = release_for("1.34")
SMALL = ("etcd", "kwok", "kind")  # projects small enough to move around in every test


@pytest.fixture(scope="module")
def real_cache() -> None:
    """The machine's own cache must hold the 1.34 toolchain (nox runs `toolchain ensure` first)."""
    for name in SMALL:
        ensure_project(PROJECTS[name], RELEASE, allow_download=False)


class CountingHandler(http.server.SimpleHTTPRequestHandler):
    requests: collections.Counter = collections.Counter()

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        CountingHandler.requests[self.path] += 1
        super().do_GET()

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def mirror(tmp_path: Path, real_cache: None) -> Iterator[tuple[str, Path]]:
    """A loopback HTTP server serving a mirror laid out from the real cache."""
    root = tmp_path / "mirror"
    write_mirror(RELEASE, root, projects=SMALL)
    CountingHandler.requests = collections.Counter()
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(CountingHandler, directory=str(root)))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}", root
    finally:
        server.shutdown()
        server.server_close()


def test_download_from_mirror_fills_an_empty_cache(tmp_path: Path, mirror: tuple[str, Path]) -> None:
    url, _ = mirror
    cache = tmp_path / "cache"
    toolchain = ensure("1.34", ["etcd", "kwokctl", "kind"], cache_root=cache, mirror=url, allow_build=False)
    assert {b.origin for b in toolchain.binaries.values()} == {"download"}
    for name in ("etcd", "kwokctl", "kind"):
        assert toolchain.path(name).is_relative_to(cache)
    assert sha256_of(toolchain.path("etcd")) == sha256_of(CachedRelease.at("etcd", RELEASE.etcd).path("etcd"))
    manifest = json.loads((cache / "etcd" / RELEASE.etcd / "manifest.json").read_text())
    assert manifest["origin"] == "download"
    # a second resolution is served from the cache without touching the mirror
    before = sum(CountingHandler.requests.values())
    again = ensure("1.34", ["etcd"], cache_root=cache, mirror=url, allow_build=False)
    assert again.binaries["etcd"].origin == "cache"
    assert sum(CountingHandler.requests.values()) == before


def test_mirror_with_a_wrong_checksum_is_refused_and_nothing_is_cached(tmp_path: Path, mirror: tuple[str, Path]) -> None:
    url, root = mirror
    sums = next(root.rglob("SHA256SUMS"))
    sums.write_text(sums.read_text().replace(sums.read_text()[:8], "00000000", 1))
    cache = tmp_path / "cache"
    with pytest.raises(ToolchainError, match="SHA-256"):
        ensure("1.34", ["etcd"], cache_root=cache, mirror=url, allow_build=False)
    assert CachedRelease.at("etcd", RELEASE.etcd, cache).manifest() is None
    assert not list((cache / "etcd").glob(".*staging*"))


def test_mirror_serving_the_wrong_binary_is_refused(tmp_path: Path, mirror: tuple[str, Path]) -> None:
    url, root = mirror
    kind = next(root.rglob("kind-linux-*[!m]"))  # the binary, not its .sha256sum
    fake = tmp_path / "not-kind"
    fake.write_text("#!/bin/sh\necho kind v0.0.1\n")
    kind.unlink()
    kind.write_bytes(fake.read_bytes())
    (kind.parent / (kind.name + ".sha256sum")).write_text(f"{sha256_of(kind)}  {kind.name}\n")
    with pytest.raises(ToolchainError, match="expected version"):
        ensure("1.34", ["kind"], cache_root=tmp_path / "cache", mirror=url, allow_build=False)


def test_corrupted_cache_entry_is_detected_and_rebuilt_from_go_modules(tmp_path: Path, mirror: tuple[str, Path]) -> None:
    url, _ = mirror
    cache = tmp_path / "cache"
    ensure("1.34", ["kind"], cache_root=cache, mirror=url, allow_build=False)
    slot = CachedRelease.at("kind", RELEASE.kind, cache)
    assert slot.problems() == []
    with slot.path("kind").open("r+b") as fh:  # flip one byte in the middle of the binary
        fh.seek(4096)
        byte = fh.read(1)
        fh.seek(4096)
        fh.write(bytes([byte[0] ^ 0xFF]))
    assert any("corrupted" in p for p in slot.problems())
    rebuilt = ensure("1.34", ["kind"], cache_root=cache, allow_download=False)
    assert rebuilt.binaries["kind"].origin == "build"
    assert slot.problems() == []
    out = subprocess.run([str(rebuilt.path("kind")), "version"], capture_output=True, text=True, check=True)
    assert RELEASE.kind.removeprefix("v") in out.stdout


def test_incomplete_release_without_manifest_is_not_used(tmp_path: Path, mirror: tuple[str, Path]) -> None:
    url, _ = mirror
    cache = tmp_path / "cache"
    slot = CachedRelease.at("etcd", RELEASE.etcd, cache)
    slot.root.mkdir(parents=True)
    (slot.root / "etcd").write_text("half a download")
    toolchain = ensure("1.34", ["etcd"], cache_root=cache, mirror=url, allow_build=False)
    assert toolchain.binaries["etcd"].origin == "download"
    assert slot.problems() == []


def test_override_wins_over_cache_and_must_be_executable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "my-etcd"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    toolchain = ensure("1.34", ["etcd"], overrides={"etcd": str(fake)}, cache_root=tmp_path / "empty", allow_download=False, allow_build=False)
    assert toolchain.binaries["etcd"].origin == "override"
    assert toolchain.path("etcd") == fake.resolve()
    monkeypatch.setenv("DRA_TESTBED_BINARY_KWOKCTL", str(fake))
    assert ensure("1.34", ["kwokctl"], cache_root=tmp_path / "empty", allow_build=False).binaries["kwokctl"].origin == "override"
    fake.chmod(0o644)
    with pytest.raises(ToolchainError, match="not an executable"):
        ensure("1.34", ["etcd"], overrides={"etcd": str(fake)}, cache_root=tmp_path / "empty", allow_build=False)


def test_offline_without_build_fails_with_a_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(download.OFFLINE_ENV, "1")
    with pytest.raises(ToolchainError, match="not cached and not downloadable"):
        ensure("1.34", ["etcd"], cache_root=tmp_path / "cache", allow_build=False)


def test_unreachable_hosts_are_detected_quickly() -> None:
    with socket_closed_port() as port:
        assert not download.reachable(f"http://127.0.0.1:{port}/x", timeout=1)
    assert not download.reachable("https://dra-testbed.invalid/x", timeout=1)


def socket_closed_port():
    import contextlib
    import socket

    @contextlib.contextmanager
    def closed() -> Iterator[int]:
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        yield port

    return closed()


def test_concurrent_runs_download_each_file_once(tmp_path: Path, mirror: tuple[str, Path]) -> None:
    url, _ = mirror
    cache = tmp_path / "cache"
    script = (
        "import sys; from pathlib import Path; from testbed.toolchain.resolve import ensure; "
        f"t = ensure('1.34', ['kwok', 'kwokctl'], cache_root=Path({str(cache)!r}), mirror={url!r}, allow_build=False); "
        "print(t.binaries['kwok'].origin)"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(3)]
    origins = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        origins.append(out.strip())
    assert sorted(origins) == ["cache", "cache", "download"]
    binaries = [p for p in CountingHandler.requests if p.endswith(("kwok-linux-amd64", "kwokctl-linux-amd64"))]
    assert binaries and all(CountingHandler.requests[p] == 1 for p in binaries)


def test_unknown_minor_names_the_valid_ones() -> None:
    with pytest.raises(UnknownVersionError, match="valid: 1.34, 1.35, 1.36, 1.37, 1.38"):
        release_for("1.29")


def test_a_prerelease_pin_is_the_one_place_that_marks_the_next_minor() -> None:
    """1.38 pins a beta: pre-release, labelled so, staging modules of the same beta; moving the pin to the
    release makes it a normal minor with nothing else changed."""
    import dataclasses

    nxt = release_for("1.38")
    assert nxt.prerelease and nxt.label == f"1.38 (pre-release {nxt.kubernetes})" and "-" in nxt.kubernetes
    assert nxt.staging == "v0." + nxt.kubernetes.removeprefix("v1.")
    released = dataclasses.replace(nxt, kubernetes="v1.38.0")
    assert not released.prerelease and released.label == "1.38" and released.staging == "v0.38.0"
    assert not any(release_for(m).prerelease for m in ("1.34", "1.35", "1.36", "1.37"))
    assert "-X k8s.io/component-base/version.gitMinor=38" in gobuild.kubernetes_ldflags(nxt.kubernetes)


@pytest.mark.parametrize(("minor", "said"), [("1.38", True), ("1.37", False)])
def test_commands_on_the_prerelease_minor_say_so(tmp_path: Path, minor: str, said: bool) -> None:
    """Resolving a toolchain (every --k8s command does) notes a pre-release once; a released minor gets no note."""
    fake = tmp_path / "kubectl"
    fake.write_text("#!/bin/sh\n")
    fake.chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "toolchain", "ensure", "--k8s", minor, "--only", "kubectl",
                          "--binary", f"kubectl={fake}"], capture_output=True, text=True, check=True)
    note = f"Kubernetes {minor} is ahead of its release: {release_for(minor).kubernetes}"
    assert (note in " ".join(out.stderr.split())) is said, out.stderr
    assert out.stdout.split("\t")[:2] == ["kubectl", "override"]


def test_staging_modules_and_version_stamps() -> None:
    go_mod = "replace (\n\tk8s.io/api => ./staging/src/k8s.io/api\n\tk8s.io/kubelet => ./staging/src/k8s.io/kubelet\n\tgithub.com/x/y => ../y\n)\n"
    assert gobuild.staging_modules(go_mod) == ["k8s.io/api", "k8s.io/kubelet"]
    flags = gobuild.kubernetes_ldflags("v1.34.4")
    assert "-X k8s.io/component-base/version.gitVersion=v1.34.4" in flags
    assert "-X k8s.io/component-base/version.gitMinor=34" in flags
    assert "-X k8s.io/client-go/pkg/version.gitMajor=1" in flags


def test_built_kubernetes_binaries_report_their_release() -> None:
    slot, _ = ensure_project(PROJECTS["kubernetes"], RELEASE, allow_download=False)
    out = subprocess.run([str(slot.path("kube-apiserver")), "--version"], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == f"Kubernetes {RELEASE.kubernetes}"


def test_toolchain_list_shows_the_renderers_whether_built_or_not(tmp_path: Path) -> None:
    """`toolchain list` has a row per renderer of `try` (helm, kustomize): missing in an empty cache, ok once
    a build is recorded in its slot."""
    import os

    from testbed.toolchain.renderers import RENDERER_PROJECTS

    env = {**os.environ, "DRA_TESTBED_CACHE": str(tmp_path)}
    listing = lambda: subprocess.run([sys.executable, "-m", "testbed.cli", "toolchain", "list"], env=env,  # noqa: E731
                                     capture_output=True, text=True, check=True).stdout.splitlines()
    rows = {line.split("\t")[1]: line.split("\t") for line in listing() if line.startswith("any\t")}
    assert set(rows) == set(RENDERER_PROJECTS) and {r[3] for r in rows.values()} == {"missing"}, rows
    version = release_for("1.34").project_version("kustomize")
    slot = CachedRelease.at("kustomize", version, root=tmp_path / "toolchain")
    staging = slot.staging_dir()
    (staging / "kustomize").write_bytes(b"#!/bin/sh\n")
    (staging / "kustomize").chmod(0o755)
    slot.seal(staging, origin="build")
    rows = {line.split("\t")[1]: line.split("\t") for line in listing() if line.startswith("any\t")}
    assert rows["kustomize"][3] == "ok" and rows["kustomize"][4] == "build", rows["kustomize"]


def test_a_release_one_binary_of_which_cannot_be_built_still_serves_the_others(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # as 1.38.0-beta.0's kubelet (a module the proxy refuses) kept its KWOK beds, which need no kubelet, from starting
    from testbed.toolchain import projects, resolve

    builds: list[str] = []

    def build(release, version, staging, log, tick) -> None:
        part = "+kind" in staging.name  # the slot of a part is named by the binaries it holds
        builds.append("part" if part else "whole")
        if not part:
            raise gobuild.BuildError("brick: module not available (403)")
        (staging / "kind").write_text(f"#!/bin/sh\necho {version.removeprefix('v')}\n")
        (staging / "kind").chmod(0o755)

    monkeypatch.setitem(resolve.PROJECTS, "kind", projects.Project("kind", ("kind", "brick"), {"kind": ("x",)}, build=build))
    monkeypatch.setitem(projects.BINARY_PROJECT, "brick", "kind")
    cache = tmp_path / "cache"
    got = ensure("1.34", ["kind"], cache_root=cache, allow_download=False)
    assert got.binaries["kind"].origin == "build" and builds == ["whole", "part"]
    again = ensure("1.34", ["kind"], cache_root=cache, allow_download=False)
    assert again.binaries["kind"].origin == "cache" and builds == ["whole", "part"]  # no second try of the whole
    with pytest.raises(ToolchainError, match="403"):
        ensure("1.34", ["kind", "brick"], cache_root=cache, allow_download=False)
