"""The upstream projects the test bed needs binaries from: what they ship and where it comes from."""

from __future__ import annotations

import platform
from dataclasses import dataclass, field
from typing import Callable

from testbed.errors import UnknownNameError

# Official download hosts; each can be pointed at a mirror with the same paths below it.
K8S_DOWNLOAD_ENV = "DRA_TESTBED_K8S_DOWNLOAD_URL"
GITHUB_DOWNLOAD_ENV = "DRA_TESTBED_GITHUB_DOWNLOAD_URL"
OFFICIAL_K8S_DOWNLOAD = "https://dl.k8s.io"
OFFICIAL_GITHUB_DOWNLOAD = "https://github.com"


def go_arch() -> str:
    """This machine's architecture in Go's and the release files' spelling."""
    machine = platform.machine().lower()
    return {"x86_64": "amd64", "aarch64": "arm64", "arm64": "arm64"}.get(machine, machine)


@dataclass(frozen=True)
class DownloadSpec:
    """Where one binary of one release is published.

    `url` names a bare binary or, with `member`, a .tar.gz holding it; `checksum_url`
    names a file with its SHA-256 (a bare digest or `sha256sum` lines), when published.
    """

    url: str
    checksum_url: str | None
    member: str | None = None


@dataclass(frozen=True)
class Project:
    """An upstream project: its binaries, how to ask each for its version, where releases live."""

    name: str
    binaries: tuple[str, ...]
    version_args: dict[str, tuple[str, ...]] = field(default_factory=dict)
    download: Callable[[str, str, dict[str, str]], DownloadSpec] | None = None
    # builds the binaries of (release, version) into the staging dir, logging to the log; None: the built-in builds
    build: Callable[..., None] | None = None

    def version_command(self, binary: str) -> tuple[str, ...]:
        """Arguments that make `binary` print its version."""
        return self.version_args.get(binary, ("--version",))

    def expected_version_text(self, version: str) -> str:
        """Text a binary of this release prints when asked for its version."""
        return version.removeprefix("v") if self.name in ("etcd", "kind", "kwok") else version


def kubernetes_test_download(binary: str, version: str, bases: dict[str, str]) -> DownloadSpec:
    """The official test tarball of a release, which holds e2e.test (the full suite)."""
    url = f"{bases['k8s']}/release/{version}/kubernetes-test-linux-{go_arch()}.tar.gz"
    return DownloadSpec(url=url, checksum_url=url + ".sha256", member=f"kubernetes/test/bin/{binary}")


def _kubernetes_download(binary: str, version: str, bases: dict[str, str]) -> DownloadSpec:
    url = f"{bases['k8s']}/release/{version}/bin/linux/{go_arch()}/{binary}"
    return DownloadSpec(url=url, checksum_url=url + ".sha256")


def _etcd_download(binary: str, version: str, bases: dict[str, str]) -> DownloadSpec:
    folder = f"etcd-{version}-linux-{go_arch()}"
    prefix = f"{bases['github']}/etcd-io/etcd/releases/download/{version}"
    return DownloadSpec(url=f"{prefix}/{folder}.tar.gz", checksum_url=f"{prefix}/SHA256SUMS", member=f"{folder}/{binary}")


def _kwok_download(binary: str, version: str, bases: dict[str, str]) -> DownloadSpec:
    url = f"{bases['github']}/kubernetes-sigs/kwok/releases/download/{version}/{binary}-linux-{go_arch()}"
    return DownloadSpec(url=url, checksum_url=None)


def _kind_download(binary: str, version: str, bases: dict[str, str]) -> DownloadSpec:
    url = f"{bases['github']}/kubernetes-sigs/kind/releases/download/{version}/kind-linux-{go_arch()}"
    return DownloadSpec(url=url, checksum_url=url + ".sha256sum")


PROJECTS: dict[str, Project] = {
    p.name: p
    for p in (
        Project(
            "kubernetes",
            ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl"),
            version_args={"kubectl": ("version", "--client")},
            download=_kubernetes_download,
        ),
        Project("etcd", ("etcd",), download=_etcd_download),
        Project("kwok", ("kwok", "kwokctl"), version_args={"kwokctl": ("--version",)}, download=_kwok_download),
        Project("kind", ("kind",), version_args={"kind": ("version",)}, download=_kind_download),
    )
}

BINARY_PROJECT: dict[str, str] = {b: p.name for p in PROJECTS.values() for b in p.binaries}


def project_of(binary: str) -> Project:
    """The project that ships `binary`; ValueError naming the valid binaries otherwise."""
    if binary not in BINARY_PROJECT:
        raise UnknownNameError(f"unknown binary {binary!r}; valid: {', '.join(sorted(BINARY_PROJECT))}")
    return PROJECTS[BINARY_PROJECT[binary]]
