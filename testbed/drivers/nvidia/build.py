"""NVIDIA's gpu-kubelet-plugin built from its pinned commit into the cache (CI's NVIDIA-driver jobs).

The Go module proxy refuses the repository (403), so the source comes from git: the public repository
(or $DRA_TESTBED_NVIDIA_REPO, any git URL or local clone), fetched at exactly PINNED_COMMIT, built as
/work/shared/vendor/dra-driver-nvidia-gpu/SOURCE.md records, from the repository's own vendor
directory. Neither source nor binary ever enters the project: both live under the cache.

`python -m testbed.drivers.nvidia.build` prints the binary's path (building it first when missing).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from testbed.host import progress
from testbed.toolchain.gobuild import BuildError, run_go

REPO_ENV = "DRA_TESTBED_NVIDIA_REPO"
DEFAULT_REPO = "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu.git"
PINNED_COMMIT = "95932046683719c43b6a0dd9613c2e5aad5d6703"  # SOURCE.md of the vendored reference binary
PACKAGE = "./cmd/gpu-kubelet-plugin"
BINARY = "gpu-kubelet-plugin"


class PluginBuildError(RuntimeError):
    """The fetched source is not the pinned commit."""


def cached_path(commit: str = PINNED_COMMIT) -> Path:
    return cache_root() / "nvidia" / commit / BINARY


def build_plugin(repo: str | None = None, commit: str = PINNED_COMMIT) -> Path:
    """The cached binary of `commit`, fetched from `repo` (default $DRA_TESTBED_NVIDIA_REPO or GitHub) and
    built when missing; the source tree is removed afterwards."""
    target = cached_path(commit)
    if target.is_file():
        return target
    repo = repo or os.environ.get(REPO_ENV) or DEFAULT_REPO
    target.parent.mkdir(parents=True, exist_ok=True)
    log = target.parent / "build.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".src-") as tmp:
        src = Path(tmp)
        with progress.step(f"fetching {repo} at {commit[:12]} (log: {log})") as step:
            env = dict(os.environ)
            run_go(["git", "init", "-q", "."], src, log, None, env)
            run_go(["git", "fetch", "-q", "--depth", "1", repo, commit], src, log, step.update, env)
            run_go(["git", "checkout", "-q", "--detach", "FETCH_HEAD"], src, log, None, env)
            head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
            if head != commit:
                raise PluginBuildError(f"{repo} gave commit {head or 'none'} for {commit}")
        env = go_env(CGO_ENABLED="1", CGO_LDFLAGS_ALLOW="-Wl,--unresolved-symbols=ignore-in-object-files", GOFLAGS="-mod=vendor")
        partial = target.with_name(BINARY + ".partial")
        with progress.step(f"building {BINARY} (log: {log})") as step:
            try:
                run_go(["nice", "-n", "10", go_binary(), "build", "-v", "-ldflags", "-s -w", "-o", str(partial), PACKAGE], src, log, step.update, env)
                partial.rename(target)
            finally:
                partial.unlink(missing_ok=True)
    return target


def main() -> int:
    try:
        print(build_plugin())
    except (PluginBuildError, BuildError, FileNotFoundError) as exc:
        print(f"nvidia plugin build: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    shutil.which("git") or sys.exit("nvidia plugin build: error: no `git` on PATH (Debian: git)")
    sys.exit(main())
