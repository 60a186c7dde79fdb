"""NVIDIA's gpu-kubelet-plugin built from its pinned commit into the cache.

The Go module proxy refuses the repository (403), so the source comes from git: the public repository
(or $DRA_TESTBED_NVIDIA_REPO, any git URL or local clone), fetched at exactly PINNED_COMMIT, built as
/work/shared/vendor/dra-driver-nvidia-gpu/SOURCE.md records, from the repository's own vendor
directory. Neither source nor binary ever enters the project: both live under the cache.

`python -m testbed.drivers.nvidia.build` prints the binary's path (building it first when missing);
`build_if_possible` is the lookup's last step (testbed/drivers/nvidia/binary.py): it gives up at once,
with the reason, where the build cannot work (offline, no git or Go, the repository's host unreachable).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

from filelock import FileLock

from hostenv.dirs import cache_root
from hostenv.goenv import GoMissingError, go_binary, go_env
from testbed.errors import EnvironmentProblem
from testbed.host import progress
from testbed.toolchain import download
from testbed.toolchain.gobuild import BuildError, run_go

REPO_ENV = "DRA_TESTBED_NVIDIA_REPO"
DEFAULT_REPO = "https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu.git"
PINNED_COMMIT = "95932046683719c43b6a0dd9613c2e5aad5d6703"  # SOURCE.md of the vendored reference binary
PACKAGE = "./cmd/gpu-kubelet-plugin"
BINARY = "gpu-kubelet-plugin"
# git's ports by URL scheme, for the reachability probe before a fetch
GIT_PORTS = {"https": 443, "http": 80, "ssh": 22, "git": 9418}
# git without a terminal: no credential prompt, an HTTP fetch stalled below 1 KB/s for 30 s is abandoned,
# ssh gives up on a host that stops answering; a user's own settings of these win
FETCH_ENV = {"GIT_TERMINAL_PROMPT": "0", "GIT_HTTP_LOW_SPEED_LIMIT": "1000", "GIT_HTTP_LOW_SPEED_TIME": "30",
             "GIT_SSH_COMMAND": "ssh -o BatchMode=yes -o ConnectTimeout=10 -o ServerAliveInterval=15"}


class PluginBuildError(EnvironmentProblem):
    """The plugin cannot be built here, or the fetched source is not the pinned commit; one line."""


def cached_path(commit: str = PINNED_COMMIT) -> Path:
    return cache_root() / "drivers" / "nvidia" / commit / BINARY  # CI caches drivers/nvidia (e2e.yml)


def source_repo() -> str:
    return os.environ.get(REPO_ENV) or DEFAULT_REPO


def remote_probe(repo: str) -> str | None:
    """The `scheme://host:port` a fetch from `repo` connects to, None for a local clone or file:// URL."""
    if "://" not in repo:
        if ":" in repo.split("/", 1)[0]:  # scp-like user@host:path is ssh
            return f"ssh://{repo.split(':', 1)[0].rpartition('@')[2]}:22"
        return None
    parts = urlsplit(repo)
    if parts.scheme == "file" or not parts.hostname:
        return None
    return f"{parts.scheme}://{parts.hostname}:{parts.port or GIT_PORTS.get(parts.scheme, 443)}"


def build_if_possible(repo: str | None = None) -> Path:
    """The pinned commit's binary built now; PluginBuildError (one line) naming why not, without waiting on
    a network that is off ($DRA_TESTBED_OFFLINE=1) or does not reach the repository's host (a 3 s probe)."""
    repo = repo or source_repo()
    probe = remote_probe(repo)
    if probe and download.downloads_disabled():
        raise PluginBuildError(f"${download.OFFLINE_ENV} is set, so {repo} is not fetched")
    try:
        go_binary()  # before the fetch, which a missing Go would waste
        for tool in ("git", "gcc"):
            if not shutil.which(tool):
                raise PluginBuildError(f"no `{tool}` on PATH to build it (Debian: {tool})")
        if probe and not download.reachable(probe):
            raise PluginBuildError(f"{probe} is not reachable to fetch {repo}")
        return build_plugin(repo)
    except (BuildError, GoMissingError) as exc:
        raise PluginBuildError(str(exc).splitlines()[0].rstrip(":")) from exc


def build_plugin(repo: str | None = None, commit: str = PINNED_COMMIT) -> Path:
    """The cached binary of `commit`, fetched from `repo` (default $DRA_TESTBED_NVIDIA_REPO or GitHub) and
    built when missing; the source tree is removed afterwards. One build at a time per commit."""
    target = cached_path(commit)
    if target.is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target.parent / "build.lock")):
        if not target.is_file():  # another process may have built it while we waited
            _build(repo or source_repo(), commit, target)
    return target


def fetch_commit(repo: str, commit: str, src: Path, log: Path) -> None:
    """Exactly `commit` of `repo` checked out into the empty folder `src` (shallow), git's output in `log`;
    PluginBuildError when the repository gives another commit. Also fetches kubernetes-sigs/ai-conformance."""
    with progress.step(f"fetching {repo} at {commit[:12]} (log: {log})") as step:
        env = {**FETCH_ENV, **os.environ}
        run_go(["git", "init", "-q", "."], src, log, None, env)
        run_go(["git", "fetch", "-q", "--depth", "1", repo, commit], src, log, step.update, env)
        run_go(["git", "checkout", "-q", "--detach", "FETCH_HEAD"], src, log, None, env)
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=src, capture_output=True, text=True).stdout.strip()
        if head != commit:
            raise PluginBuildError(f"{repo} gave commit {head or 'none'} for {commit}")


def _build(repo: str, commit: str, target: Path) -> None:
    log = target.parent / "build.log"
    log.write_text("")
    with tempfile.TemporaryDirectory(dir=target.parent, prefix=".src-") as tmp:
        src = Path(tmp)
        fetch_commit(repo, commit, src, log)
        env = go_env(CGO_ENABLED="1", CGO_LDFLAGS_ALLOW="-Wl,--unresolved-symbols=ignore-in-object-files", GOFLAGS="-mod=vendor")
        partial = target.with_name(BINARY + ".partial")
        with progress.step(f"building {BINARY} (log: {log})") as step:
            try:
                run_go(["nice", "-n", "10", go_binary(), "build", "-v", "-ldflags", "-s -w", "-o", str(partial), PACKAGE], src, log, step.update, env)
                partial.rename(target)
            finally:
                partial.unlink(missing_ok=True)


def main() -> int:
    try:
        print(build_plugin())
    except (PluginBuildError, BuildError, GoMissingError, FileNotFoundError) as exc:
        print(f"nvidia plugin build: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    shutil.which("git") or sys.exit("nvidia plugin build: error: no `git` on PATH (Debian: git)")
    sys.exit(main())
