"""Building release binaries from Go modules with the machine's Go, when nothing can be downloaded.

k8s.io/kubernetes replaces its k8s.io/* staging modules with local paths, so it cannot be built with
`go install pkg@version`; a small wrapper module requires it and points each staging module at its
published v0.X.Y. etcd's server module has local replaces too and gets a two-line wrapper main.
kwok, kind, helm and kustomize build with `go install pkg@version`.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Callable

from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from hostenv.processes import stream

from testbed.errors import EnvironmentProblem

Progress = Callable[[str], None]


class BuildError(EnvironmentProblem):
    """A Go build failed; the message names the log holding its output."""


BUILD_DATE = "1970-01-01T00:00:00Z"  # fixed so that rebuilds of one version are byte-identical


def run_go(args: list[str], cwd: Path, log: Path, progress: Progress | None, env: dict[str, str]) -> None:
    """Run a Go command, streaming its lines into `log` and each compiled package into `progress`."""
    with log.open("a") as sink:
        sink.write("$ " + " ".join(args) + "\n")
        sink.flush()
        def take(line: str) -> None:
            sink.write(line)
            if progress:
                progress(line.rstrip())

        if stream(args, take, cwd=cwd, env=env) != 0:  # interrupted: go and its compilers are stopped
            sink.flush()
            tail = "".join(log.read_text().splitlines(keepends=True)[-15:])
            raise BuildError(f"`{' '.join(args[:3])} ...` failed (full log: {log}):\n{tail}")


def _module_info(module: str, version: str, workdir: Path, log: Path) -> dict:
    out = subprocess.run(
        [go_binary(), "mod", "download", "-json", f"{module}@{version}"],
        cwd=workdir, env=go_env(), capture_output=True, text=True,
    )
    if out.returncode != 0:
        log.write_text(out.stdout + out.stderr)
        raise BuildError(f"cannot download Go module {module}@{version}: {out.stderr.strip() or out.stdout.strip()}")
    return json.loads(out.stdout)


def staging_modules(kubernetes_go_mod: str) -> list[str]:
    """The k8s.io/* modules that k8s.io/kubernetes's go.mod replaces with local staging paths."""
    return sorted(set(re.findall(r"^\s*(k8s\.io/[\w.-]+)\s+=>\s+\./staging/", kubernetes_go_mod, re.M)))


def kubernetes_ldflags(version: str) -> str:
    """Version stamps that make the binaries report `version` (kwokctl, kubeadm and kind read them)."""
    major, minor = version.removeprefix("v").split(".")[:2]
    stamps = {
        "gitVersion": version, "gitMajor": major, "gitMinor": minor,
        "gitCommit": "0" * 40, "gitTreeState": "clean", "buildDate": BUILD_DATE,
    }
    flags = ["-s", "-w"]
    for package in ("k8s.io/component-base/version", "k8s.io/client-go/pkg/version"):
        flags += [f"-X {package}.{key}={value}" for key, value in stamps.items()]
    return " ".join(flags)


def _workdir(name: str) -> Path:
    path = cache_root() / "go" / "work" / name
    shutil.rmtree(path, ignore_errors=True)
    path.mkdir(parents=True)
    return path


def _wrapper_module(workdir: Path, requires: dict[str, str], replaces: dict[str, str], imports: list[str], main: str | None) -> None:
    lines = ["module dratestbed.local/build", "", "go 1.24.0", ""]
    lines += [f"require {mod} {ver}" for mod, ver in requires.items()]
    lines += [f"replace {mod} => {mod} {ver}" for mod, ver in replaces.items()]
    (workdir / "go.mod").write_text("\n".join(lines) + "\n")
    if imports:
        body = "\n".join(f'\t_ "{imp}"' for imp in imports)
        (workdir / "tools.go").write_text(f"//go:build tools\n\npackage tools\n\nimport (\n{body}\n)\n")
    if main:
        (workdir / "main.go").write_text(main)


def kubernetes_wrapper(name: str, version: str, staging_version: str, imports: list[str], log: Path) -> tuple[Path, Path]:
    """A fresh wrapper module requiring k8s.io/kubernetes `version` (staging modules pinned) that imports
    `imports`; returns the module's directory and the k8s.io/kubernetes module's source directory."""
    work = _workdir(name)
    info = _module_info("k8s.io/kubernetes", version, work, log)
    replaces = {mod: staging_version for mod in staging_modules(Path(info["GoMod"]).read_text())}
    _wrapper_module(work, {"k8s.io/kubernetes": version}, replaces, imports, None)
    return work, Path(info["Dir"])


def build_kubernetes(version: str, staging_version: str, binaries: tuple[str, ...], out: Path, log: Path, progress: Progress | None) -> None:
    """Build Kubernetes binaries (kube-apiserver, kubelet, ...) of `version` into `out`."""
    packages = [f"k8s.io/kubernetes/cmd/{b}" for b in binaries]
    work, _ = kubernetes_wrapper(f"kubernetes-{version}", version, staging_version, packages, log)
    env = go_env(CGO_ENABLED="0")
    run_go([go_binary(), "mod", "tidy"], work, log, progress, env)
    run_go([go_binary(), "build", "-v", "-trimpath", "-ldflags", kubernetes_ldflags(version), "-o", str(out) + "/", *packages], work, log, progress, env)


ETCD_MAIN = """package main

import (
\t"os"

\t"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() { etcdmain.Main(os.Args) }
"""


def build_etcd(version: str, binaries: tuple[str, ...], out: Path, log: Path, progress: Progress | None) -> None:
    """Build the etcd server of `version` into `out` through a wrapper main around etcdmain."""
    work = _workdir(f"etcd-{version}")
    _wrapper_module(work, {"go.etcd.io/etcd/server/v3": version}, {}, [], ETCD_MAIN)
    env = go_env(CGO_ENABLED="0")
    run_go([go_binary(), "mod", "tidy"], work, log, progress, env)
    run_go([go_binary(), "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(out / "etcd"), "."], work, log, progress, env)


INSTALL_PACKAGES = {
    "kwok": {"kwok": "sigs.k8s.io/kwok/cmd/kwok", "kwokctl": "sigs.k8s.io/kwok/cmd/kwokctl"},
    "kind": {"kind": "sigs.k8s.io/kind"},
    "helm": {"helm": "helm.sh/helm/v4/cmd/helm"},
    "kustomize": {"kustomize": "sigs.k8s.io/kustomize/kustomize/v5"},
    "kueue": {"kueue": "sigs.k8s.io/kueue/cmd/kueue"},
}
# Helm reports the version its Makefile stamps in, not its module's: unstamped it says only "v4.3".
# Kueue's manager has no version flag; it logs the stamped GitVersion first thing (unstamped: "v0.0.0-main").
VERSION_STAMPS = {
    "helm": "-X helm.sh/helm/v4/internal/version.version={version}",
    "kueue": "-X sigs.k8s.io/kueue/pkg/version.GitVersion={version}",
}


def build_installable(project: str, version: str, binaries: tuple[str, ...], out: Path, log: Path, progress: Progress | None) -> None:
    """`go install pkg@version` for projects whose modules build as published (kwok, kind, helm, kustomize)."""
    work = _workdir(f"{project}-{version}")
    env = go_env(CGO_ENABLED="0", GOBIN=str(out))
    packages = [f"{INSTALL_PACKAGES[project][b]}@{version}" for b in binaries]
    ldflags = " ".join(["-s -w", VERSION_STAMPS.get(project, "").format(version=version)]).strip()
    run_go([go_binary(), "install", "-v", "-trimpath", "-ldflags", ldflags, *packages], work, log, progress, env)
