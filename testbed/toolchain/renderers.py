"""The manifest renderers `try` runs for `-k DIR` and `--helm CHART`: kustomize and helm, built from their Go
modules on first use and cached beside the cluster binaries; Kueue's manager (testbed.addons.kueue) too.

They are not part of `toolchain ensure`: no cluster needs them, and each is a build of minutes that a cold
`up` should not pay. One version serves every Kubernetes minor (hostenv.versions.RENDERERS).
"""

from __future__ import annotations

import os
from pathlib import Path

from hostenv.versions import DEFAULT_MINOR, release_for
from testbed.toolchain.projects import Project
from testbed.toolchain.resolve import OVERRIDE_ENV_PREFIX, ToolchainError, ensure_project

RENDERER_PROJECTS: dict[str, Project] = {
    p.name: p
    for p in (
        Project("helm", ("helm",), version_args={"helm": ("version", "--short")}),
        Project("kustomize", ("kustomize",), version_args={"kustomize": ("version",)}),
        # Kueue's manager has no version flag: an unreadable kubeconfig makes it log its stamped version, then exit
        Project("kueue", ("kueue",), version_args={"kueue": ("--kubeconfig=/nonexistent/kubeconfig",)}),
    )
}


def ensure_renderer(name: str, *, cache_root: Path | None = None) -> Path:
    """Path of the `helm`, `kustomize` or `kueue` binary: DRA_TESTBED_BINARY_HELM / _KUSTOMIZE / _KUEUE when set,
    else the cached build, built first when missing (progress shown, log beside the cache slot)."""
    override = os.environ.get(OVERRIDE_ENV_PREFIX + name.upper())
    if override:
        path = Path(override).expanduser().resolve()
        if not (path.is_file() and os.access(path, os.X_OK)):
            raise ToolchainError(f"{OVERRIDE_ENV_PREFIX}{name.upper()}: {path} is not an executable file")
        return path
    project = RENDERER_PROJECTS[name]
    slot, _ = ensure_project(project, release_for(DEFAULT_MINOR), cache_root=cache_root, allow_download=False)
    return slot.path(name)
