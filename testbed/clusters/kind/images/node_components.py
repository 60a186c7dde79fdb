"""Node-image components built from Go modules: container runtime, CNI plugins, CoreDNS, kubeadm, kube-proxy.

Every module here installs with plain `go install pkg@version` (none has replace directives), except
kubeadm and kube-proxy, which come from k8s.io/kubernetes through the toolchain's wrapper-module build.
Binaries land in `~/.cache/dra-testbed/images/<k8s version>/bin`, reused while their stamp matches.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from hostenv.versions import Release
from testbed.host import hostdeps, progress
from testbed.toolchain import gobuild


@dataclass(frozen=True)
class GoComponent:
    """Binaries of one Go module, built with `go install`."""

    name: str
    module: str
    version: str
    packages: dict[str, str]  # binary name -> package path inside the module
    ldflags: str = ""
    tags: str = ""
    cgo: bool = False


# Versions follow what kind v0.30.0's own base image pairs with Kubernetes 1.34.
CONTAINERD = GoComponent(
    "containerd", "github.com/containerd/containerd/v2", "v2.1.4",
    {"containerd": "cmd/containerd", "containerd-shim-runc-v2": "cmd/containerd-shim-runc-v2", "ctr": "cmd/ctr"},
    ldflags="-X github.com/containerd/containerd/v2/version.Version=v2.1.4",
    # snapshotters we never select inside a kind node; btrfs would also need cgo headers
    tags="no_aufs no_zfs no_btrfs no_devmapper",
)
RUNC = GoComponent(
    "runc", "github.com/opencontainers/runc", "v1.3.0", {"runc": "."},
    ldflags="-X main.version=1.3.0", tags="seccomp", cgo=True,  # seccomp filters need libseccomp through cgo
)
CRICTL = GoComponent(
    "crictl", "sigs.k8s.io/cri-tools", "v1.34.0", {"crictl": "cmd/crictl"},
    ldflags="-X sigs.k8s.io/cri-tools/pkg/version.Version=v1.34.0",
)
CNI_PLUGINS = GoComponent(
    "CNI plugins", "github.com/containernetworking/plugins", "v1.7.1",
    {name: f"plugins/{kind}/{name}" for kind, name in (
        ("main", "ptp"), ("main", "bridge"), ("main", "loopback"), ("ipam", "host-local"), ("meta", "portmap"))},
    ldflags="-X github.com/containernetworking/plugins/pkg/utils/buildversion.BuildVersion=v1.7.1",
)
COREDNS = GoComponent("coredns", "github.com/coredns/coredns", "v1.12.1", {"coredns": "."})

GO_COMPONENTS = (CONTAINERD, RUNC, CRICTL, CNI_PLUGINS, COREDNS)
KUBERNETES_EXTRA = ("kubeadm", "kube-proxy")  # not in the toolchain: only node images need them


def images_root(release: Release) -> Path:
    """Per-Kubernetes-version directory of everything node images are made of."""
    return cache_root() / "images" / release.kubernetes


def _stamp(release: Release) -> str:
    parts = [f"{c.module}@{c.version}:{c.tags}:{c.ldflags}" for c in GO_COMPONENTS]
    return json.dumps({"kubernetes": release.kubernetes, "components": parts}, sort_keys=True)


def _build(component: GoComponent, out: Path, log: Path, step: progress.Step) -> None:
    """Build through a wrapper module: some of these modules carry exclude directives `go install` refuses."""
    work = cache_root() / "go" / "work" / f"image-{component.name.replace(' ', '-')}-{component.version}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    packages = [f"{component.module}/{pkg}".removesuffix("/.") for pkg in component.packages.values()]
    imports = "\n".join(f'\t_ "{p}"' for p in packages)
    (work / "go.mod").write_text(f"module dratestbed.local/image\n\ngo 1.24.0\n\nrequire {component.module} {component.version}\n")
    (work / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{imports}\n)\n")
    env = go_env(CGO_ENABLED="1" if component.cgo else "0")
    gobuild.run_go([go_binary(), "mod", "tidy"], work, log, step.tick, env)
    args = [go_binary(), "build", "-v", "-trimpath", "-ldflags", f"-s -w {component.ldflags}".strip()]
    if component.tags:
        args += ["-tags", component.tags]
    for name, package in zip(component.packages, packages):
        gobuild.run_go([*args, "-o", str(out / name), package], work, log, step.tick, env)


def ensure_components(release: Release) -> Path:
    """Directory holding every node-image binary built from Go modules for `release`."""
    root = images_root(release)
    bin_dir = root / "bin"
    stamp_file = root / "bin.stamp"
    wanted = [name for c in GO_COMPONENTS for name in c.packages] + list(KUBERNETES_EXTRA)
    if stamp_file.is_file() and stamp_file.read_text() == _stamp(release) and all((bin_dir / n).is_file() for n in wanted):
        return bin_dir
    hostdeps.ensure("runc")  # runc's seccomp support links libseccomp through cgo
    staging = root / "bin.partial"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir(parents=True)
    log = root / "bin.build.log"
    log.write_text("")
    for component in GO_COMPONENTS:
        with progress.step(f"building {component.name} {component.version} (log: {log})") as step:
            _build(component, staging, log, step)
    with progress.step(f"building kubeadm and kube-proxy {release.kubernetes} (log: {log})") as step:
        gobuild.build_kubernetes(release.kubernetes, release.staging, KUBERNETES_EXTRA, staging, log, step.tick)
    shutil.rmtree(bin_dir, ignore_errors=True)
    staging.rename(bin_dir)
    stamp_file.write_text(_stamp(release))
    return bin_dir
