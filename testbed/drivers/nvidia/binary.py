"""Where NVIDIA's gpu-kubelet-plugin binary is, found in this order:

1. the explicit path (`--driver-binary PATH`) or $DRA_TESTBED_NVIDIA_PLUGIN; an unusable one is an error;
2. the cache, where `python -m testbed.drivers.nvidia.build` (`nox -s nvidia-plugin`) builds the pinned commit;
3. the reference binary kept beside the checkout: <shared>/vendor/dra-driver-nvidia-gpu/gpu-kubelet-plugin;
4. a build of the pinned commit now, where git can reach its repository (never with $DRA_TESTBED_OFFLINE=1);
5. else PluginNotFound, one line saying how to provide it.

The binary is a test input built from kubernetes-sigs/dra-driver-nvidia-gpu, never part of the project.
`python -m testbed.drivers.nvidia.binary` prints the binary found and where it came from.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass
from pathlib import Path

from hostenv.dirs import shared_inputs
from testbed.drivers.nvidia import build
from testbed.errors import EnvironmentProblem

PLUGIN_ENV = "DRA_TESTBED_NVIDIA_PLUGIN"
REFERENCE = Path("vendor") / "dra-driver-nvidia-gpu" / build.BINARY  # under the shared inputs


class PluginNotFound(EnvironmentProblem):
    """No usable binary; the message is one line saying how to provide it."""


@dataclass(frozen=True)
class FoundPlugin:
    """The binary and where it came from (`source`), for progress lines and test headers."""

    path: Path
    source: str

    def __str__(self) -> str:
        return f"{self.path} ({self.source})"


def reference_path() -> Path:
    return shared_inputs() / REFERENCE


def _usable(path: Path) -> bool:
    return path.is_file() and os.access(path, os.X_OK)


def find_plugin(explicit: str | os.PathLike[str] | None = None) -> FoundPlugin:
    """The binary to run and its source, by the order above; PluginNotFound (one line) otherwise."""
    given = explicit or os.environ.get(PLUGIN_ENV)
    if given:
        source = "--driver-binary" if explicit else f"${PLUGIN_ENV}"
        path = Path(given).expanduser()
        if not _usable(path):
            raise PluginNotFound(f"{source} {str(given)!r} is not an executable file: give the path of a "
                                 f"gpu-kubelet-plugin built from kubernetes-sigs/dra-driver-nvidia-gpu")
        return FoundPlugin(path.resolve(), source)
    cached = build.cached_path()
    if _usable(cached):
        return FoundPlugin(cached, f"the cache, built from commit {build.PINNED_COMMIT[:12]}")
    reference = reference_path()
    if _usable(reference):
        return FoundPlugin(reference.resolve(), "the reference binary beside the checkout")
    try:
        built = build.build_if_possible()
    except build.PluginBuildError as exc:
        raise PluginNotFound(
            f"NVIDIA's gpu-kubelet-plugin is needed here and none was found (not in the cache, not at {reference}, "
            f"not built: {exc}): pass --driver-binary PATH, set {PLUGIN_ENV}=PATH, place the binary there, or set "
            f"{build.REPO_ENV} to a clone of kubernetes-sigs/dra-driver-nvidia-gpu to build it from") from None
    return FoundPlugin(built, f"built now from {build.source_repo()} at commit {build.PINNED_COMMIT[:12]}")


def plugin_binary(explicit: str | os.PathLike[str] | None = None) -> Path:
    """The binary to run; PluginNotFound (one line) when none is found or the given path is unusable."""
    return find_plugin(explicit).path


def main() -> int:
    try:
        print(find_plugin())
    except PluginNotFound as exc:
        print(f"nvidia plugin: error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
