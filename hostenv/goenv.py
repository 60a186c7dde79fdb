"""The environment every Go invocation of dra-testbed runs with."""

from __future__ import annotations

import os
import shutil

from hostenv.dirs import cache_root
from hostenv.errors import EnvironmentProblem


class GoMissingError(EnvironmentProblem):
    """The machine has no Go toolchain on PATH."""


def go_binary() -> str:
    """Path of the `go` command; raises GoMissingError naming what to install."""
    found = shutil.which("go")
    if not found:
        raise GoMissingError("no `go` on PATH: install Go 1.24 or newer to build binaries from Go modules")
    return found


def go_env(**extra: str) -> dict[str, str]:
    """os.environ plus module and build caches under the dra-testbed cache, so builds stay warm per user."""
    root = cache_root() / "go"
    env = dict(os.environ)
    env.update(
        GOMODCACHE=str(root / "mod"),
        GOCACHE=str(root / "build"),
        GOFLAGS="-mod=mod -buildvcs=false",
        # auto: the machine's Go unless a module declares a newer one (Kubernetes 1.38's go 1.27.0), which
        # Go then fetches once through the module proxy into GOMODCACHE; older modules build exactly as before
        GOTOOLCHAIN=os.environ.get("GOTOOLCHAIN", "auto"),
    )
    env.update(extra)
    return env
