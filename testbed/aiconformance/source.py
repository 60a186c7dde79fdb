"""kubernetes-sigs/ai-conformance's test binary, built from its source at a pinned commit into the cache.

The Go module proxy refuses the module (403), so its source comes from git, as users get it: the public
repository (or $DRA_TESTBED_AI_CONFORMANCE_REPO, any git URL or local clone) fetched at exactly the commit the
cluster's minor runs, then `go test -c ./test` with its dependencies from the module proxy. The source stays
in the cache beside the binary: its checklist templates (conformance-versions/) are read from there. Neither
ever enters the project.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from hostenv.dirs import cache_root
from hostenv.goenv import GoMissingError, go_binary, go_env
from testbed.drivers.nvidia.build import PluginBuildError, fetch_commit, remote_probe
from testbed.errors import EnvironmentProblem
from testbed.host import progress
from testbed.toolchain import download
from testbed.toolchain.gobuild import BuildError, run_go

REPO_ENV = "DRA_TESTBED_AI_CONFORMANCE_REPO"
DEFAULT_REPO = "https://github.com/kubernetes-sigs/ai-conformance.git"
# The repository has no release tags yet (its README asks for the tests of the cluster's release tag), so every
# minor runs main as of 2026-06-11; a minor moves to its tag's commit here once one is cut.
MAIN_2026_06_11 = "af907ca8c5343b731c7bcea25c15a06c51066795"
COMMITS = {"1.34": MAIN_2026_06_11, "1.35": MAIN_2026_06_11, "1.36": MAIN_2026_06_11, "1.37": MAIN_2026_06_11}


class SuiteBuildError(EnvironmentProblem):
    """The tests cannot be fetched or built here; one line naming why."""


class SourceUnreachable(SuiteBuildError):
    """The tests are not cached and their source cannot be fetched here: offline, or its host unreachable."""



@dataclass(frozen=True)
class BuiltTests:
    """The test binary of one commit and the source tree it was built from."""

    binary: Path
    source: Path
    commit: str
    repo: str


# what is built, and the name of the binary in the cache
PACKAGE = "./test"
BINARY = "ai-conformance.test"


def commit_for(minor: str) -> str:
    """The commit whose tests a cluster of `minor` runs (a minor added to the toolchain later runs main's pin
    until it gets an entry)."""
    return COMMITS.get(minor, MAIN_2026_06_11)


def source_repo() -> str:
    return os.environ.get(REPO_ENV) or DEFAULT_REPO


def source_unreachable(minor: str | None = None) -> bool:
    """Whether the tests of `minor` (every minor's, when None) are neither cached nor fetchable from here."""
    commits = [commit_for(minor)] if minor else sorted({*COMMITS.values(), MAIN_2026_06_11})
    if all(cached(c) for c in commits):
        return False
    probe = remote_probe(source_repo())
    return bool(probe) and (download.downloads_disabled() or not download.reachable(probe))


def _home(commit: str) -> Path:
    return cache_root() / "ai-conformance" / commit


def cached(commit: str) -> BuiltTests | None:
    """The built tests of `commit` when the cache holds them."""
    home = _home(commit)
    binary, source = home / BINARY, home / "src"
    if binary.is_file() and (source / "go.mod").is_file():
        return BuiltTests(binary, source, commit, (home / "repo").read_text().strip() if (home / "repo").is_file() else "")
    return None


def ensure_tests(minor: str, repo: str | None = None) -> BuiltTests:
    """The test binary for a cluster of `minor`: from the cache, else fetched and built now (one build at a
    time per commit). SuiteBuildError (one line) where it cannot be: offline, no git or Go, host unreachable."""
    commit = commit_for(minor)
    found = cached(commit)
    if found:
        return found
    repo = repo or source_repo()
    probe = remote_probe(repo)
    if probe and download.downloads_disabled():
        raise SourceUnreachable(f"${download.OFFLINE_ENV} is set, so {repo} is not fetched; set {REPO_ENV} to a local clone")
    try:
        go_binary()
        if not shutil.which("git"):
            raise SuiteBuildError("no `git` on PATH to fetch the tests' source (Debian: git)")
        if probe and not download.reachable(probe):
            raise SourceUnreachable(f"{probe} is not reachable to fetch {repo}; set {REPO_ENV} to a clone of kubernetes-sigs/ai-conformance")
        home = _home(commit)
        home.mkdir(parents=True, exist_ok=True)
        with FileLock(str(home / "build.lock")):
            if not cached(commit):  # another process may have built it while we waited
                _build(repo, commit, home)
    except (BuildError, GoMissingError) as exc:
        raise SuiteBuildError(str(exc).splitlines()[0].rstrip(":")) from exc
    return cached(commit)  # type: ignore[return-value]


def _build(repo: str, commit: str, home: Path) -> None:
    log = home / "build.log"
    log.write_text("")
    shutil.rmtree(home / "src", ignore_errors=True)
    with tempfile.TemporaryDirectory(dir=home, prefix=".src-", ignore_cleanup_errors=True) as tmp:  # renamed into place when built
        src = Path(tmp)
        try:
            fetch_commit(repo, commit, src, log)
        except PluginBuildError as exc:  # the fetch is shared with NVIDIA's plugin build, the error is ours
            raise SuiteBuildError(str(exc)) from None
        partial = home / (BINARY + ".partial")
        with progress.step(f"building the AI-conformance tests (go test -c {PACKAGE}; log: {log})") as step:
            try:
                run_go(["nice", "-n", "10", go_binary(), "test", "-c", "-o", str(partial), PACKAGE], src, log, step.update, go_env())
                shutil.rmtree(src / ".git")
                src.rename(home / "src")
                (home / "repo").write_text(repo + "\n")
                partial.rename(home / BINARY)
            finally:
                partial.unlink(missing_ok=True)


def list_tests(binary: Path) -> list[str]:
    """The top-level tests the binary holds (`-test.list`)."""
    out = subprocess.run([str(binary), "-test.list", "."], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise SuiteBuildError(f"{binary} -test.list failed: {(out.stderr or out.stdout).strip()[-300:]}")
    return [line.strip() for line in out.stdout.splitlines() if line.strip().startswith("Test")]
