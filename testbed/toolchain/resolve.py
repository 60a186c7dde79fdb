"""Finding every binary a cluster needs: override, then cache, then official download, then a Go build."""

from __future__ import annotations

import dataclasses
import functools
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

from hostenv.goenv import GoMissingError
from testbed.errors import EnvironmentProblem
from testbed.host import progress
from testbed.toolchain import download, gobuild
from testbed.toolchain.projects import (
    GITHUB_DOWNLOAD_ENV,
    K8S_DOWNLOAD_ENV,
    OFFICIAL_GITHUB_DOWNLOAD,
    OFFICIAL_K8S_DOWNLOAD,
    PROJECTS,
    Project,
    project_of,
)
from hostenv.versions import Release, release_for
from testbed.toolchain.store import CachedRelease

OVERRIDE_ENV_PREFIX = "DRA_TESTBED_BINARY_"


class ToolchainError(EnvironmentProblem):
    """A binary could not be found, fetched or built."""


@dataclass(frozen=True)
class Binary:
    """One resolved binary and where it came from: override, cache, download or build."""

    name: str
    path: Path
    origin: str


@dataclass
class Toolchain:
    """The binaries of one Kubernetes minor."""

    release: Release
    binaries: dict[str, Binary] = field(default_factory=dict)

    def path(self, name: str) -> Path:
        return self.binaries[name].path


def download_bases(mirror: str | None = None) -> dict[str, str]:
    """Base URLs for release downloads: `mirror` for all, else the env overrides, else the official hosts."""
    if mirror:
        return {"k8s": mirror.rstrip("/"), "github": mirror.rstrip("/")}
    return {
        "k8s": os.environ.get(K8S_DOWNLOAD_ENV, OFFICIAL_K8S_DOWNLOAD).rstrip("/"),
        "github": os.environ.get(GITHUB_DOWNLOAD_ENV, OFFICIAL_GITHUB_DOWNLOAD).rstrip("/"),
    }


def env_overrides() -> dict[str, str]:
    """Overrides from DRA_TESTBED_BINARY_<NAME> variables, e.g. DRA_TESTBED_BINARY_KUBE_APISERVER."""
    found = {}
    for name in (b for p in PROJECTS.values() for b in p.binaries):
        value = os.environ.get(OVERRIDE_ENV_PREFIX + name.upper().replace("-", "_"))
        if value:
            found[name] = value
    return found


def check_version(project: Project, binary: str, path: Path, version: str) -> None:
    """Fail unless `path` runs and reports `version`: catches wrong, foreign or unstamped binaries."""
    try:
        out = subprocess.run([str(path), *project.version_command(binary)], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        raise ToolchainError(f"{path} does not run: {exc}") from exc
    text = out.stdout + out.stderr
    want = project.expected_version_text(version)
    if want not in text:
        raise ToolchainError(f"{path} reports {text.strip()[:120]!r}, expected version {want}")


def _download_release(project: Project, version: str, staging: Path, bases: dict[str, str]) -> None:
    assert project.download is not None
    for binary in project.binaries:
        spec = project.download(binary, version, bases)
        with progress.step(f"downloading {binary} {version}") as current:
            download.fetch_binary(spec, staging / binary, lambda done, total: current.update(
                f"{done >> 20} of {total >> 20 if total else '?'} MiB"))
        check_version(project, binary, staging / binary, version)


def _build_release(project: Project, release: Release, version: str, staging: Path) -> None:
    log = staging.parent / f"{version}.build.log"
    log.write_text("")
    title = f"building {project.name} {version} from Go modules (log: {log})"
    with progress.step(title) as current:
        tick = current.tick
        if project.build is not None:
            project.build(release, version, staging, log, tick)
        elif project.name == "kubernetes":
            gobuild.build_kubernetes(version, release.staging, project.binaries, staging, log, tick)
        elif project.name == "etcd":
            gobuild.build_etcd(version, project.binaries, staging, log, tick)
        else:
            gobuild.build_installable(project.name, version, project.binaries, staging, log, tick)
    for binary in project.binaries:
        check_version(project, binary, staging / binary, version)


def ensure_project(
    project: Project,
    release: Release,
    *,
    cache_root: Path | None = None,
    allow_download: bool = True,
    allow_build: bool = True,
    mirror: str | None = None,
    variant: str = "",
) -> tuple[CachedRelease, str]:
    """Make the cache hold a verified release of `project`; returns the slot and how it got there. A `variant`
    names a slot of its own beside the release's (a part of its binaries: see ensure)."""
    version = release.project_version(project.name)
    slot = CachedRelease.at(project.name, version + variant, cache_root)
    if not slot.problems():
        return slot, "cache"
    with slot.lock():
        problems = slot.problems()  # another process may have finished it while we waited
        if not problems:
            return slot, "cache"
        if slot.manifest() is not None:
            progress.note(f"[yellow]cached {project.name} {version} is damaged ({problems[0]}); fetching it again[/yellow]")
        staging = slot.staging_dir()
        try:
            origin = _fill(project, release, version, staging, allow_download, allow_build, mirror)
            slot.seal(staging, origin)
        finally:
            shutil.rmtree(staging, ignore_errors=True)
    return slot, origin


def _fill(project: Project, release: Release, version: str, staging: Path, allow_download: bool, allow_build: bool, mirror: str | None) -> str:
    bases = download_bases(mirror)
    errors: list[str] = []
    if allow_download and project.download and (mirror or not download.downloads_disabled()):
        probe = bases["k8s" if project.name == "kubernetes" else "github"]
        if download.reachable(probe):
            try:
                _download_release(project, version, staging, bases)
                return "download"
            except (download.DownloadError, ToolchainError) as exc:
                errors.append(str(exc))
                progress.note(f"[yellow]download failed ({exc}); building from Go modules instead[/yellow]")
                for leftover in staging.iterdir():
                    leftover.unlink()
        else:
            errors.append(f"{probe} is not reachable")
    if not allow_build:
        raise ToolchainError(f"{project.name} {version}: not cached and not downloadable ({'; '.join(errors) or 'downloads off'})")
    try:
        _build_release(project, release, version, staging)
    except (gobuild.BuildError, GoMissingError) as exc:
        raise ToolchainError(str(exc)) from exc
    return "build"


@functools.cache
def _announce_prerelease(release: Release) -> None:
    """Every command that takes --k8s resolves its toolchain here: say, once per process, that the minor is
    a pre-release, so nobody reads its results as a released Kubernetes'."""
    progress.note(f"[yellow]Kubernetes {release.minor} is ahead of its release: {release.kubernetes} "
                  "(the next lane: reported, not gating)[/yellow]")


def ensure(
    minor: str,
    binaries: Iterable[str] | None = None,
    *,
    overrides: dict[str, str] | None = None,
    cache_root: Path | None = None,
    allow_download: bool = True,
    allow_build: bool = True,
    mirror: str | None = None,
) -> Toolchain:
    """Resolve `binaries` (default: all) for Kubernetes `minor`, fetching or building what is missing."""
    release = release_for(minor)
    if release.prerelease:
        _announce_prerelease(release)
    wanted = list(binaries) if binaries is not None else [b for p in PROJECTS.values() for b in p.binaries]
    chosen = {**env_overrides(), **(overrides or {})}
    toolchain = Toolchain(release)
    by_project: dict[str, list[str]] = {}
    for name in wanted:
        project = project_of(name)
        if name in chosen:
            path = Path(chosen[name]).expanduser().resolve()
            if not (path.is_file() and os.access(path, os.X_OK)):
                raise ToolchainError(f"override for {name}: {path} is not an executable file")
            toolchain.binaries[name] = Binary(name, path, "override")
        else:
            by_project.setdefault(project.name, []).append(name)
    for project_name, names in by_project.items():
        slot, origin = _ensure_names(PROJECTS[project_name], names, release, cache_root=cache_root,
                                     allow_download=allow_download, allow_build=allow_build, mirror=mirror)
        for name in names:
            toolchain.binaries[name] = Binary(name, slot.path(name), origin)
    return toolchain


def _ensure_names(project: Project, names: list[str], release: Release, **options) -> tuple[CachedRelease, str]:
    """The slot holding `names` of `project`: the whole release's, or, where some other binary of the release
    cannot be made here, a slot of just `names`. Seen: 1.38.0-beta.0's kubelet needs a module version the Go
    proxy refuses (sigs.k8s.io/iptables-wrappers v1.0.0: 403), which kept a KWOK bed, needing no kubelet, from
    its control plane. Tried in that order, so a machine that can make the whole release builds it once."""
    subset = sorted(set(names))
    if subset == sorted(project.binaries):
        return ensure_project(project, release, **options)
    version, variant = release.project_version(project.name), "+" + ",".join(subset)
    for cached in (CachedRelease.at(project.name, version, options.get("cache_root")),
                   CachedRelease.at(project.name, version + variant, options.get("cache_root"))):
        if not cached.problems():  # verified once here, not again by ensure_project
            return cached, "cache"
    part = dataclasses.replace(project, binaries=tuple(subset))
    try:
        return ensure_project(project, release, **options)
    except ToolchainError as exc:
        if not options.get("allow_build", True):
            raise
        left_out = ", ".join(sorted(set(project.binaries) - set(subset)))
        progress.note(f"[yellow]{project.name} {version} could not be made whole "
                      f"({str(exc).splitlines()[0][:160]}); building only {', '.join(subset)} (not {left_out})[/yellow]")
        return ensure_project(part, release, variant=variant, **options)
