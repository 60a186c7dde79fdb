"""Our nvidia-cdi-hook (cdi_hook.c), built static with the host's C compiler into the cache.

NVIDIA's CDI specs name the hook by its path on the node; a static binary runs on any node image.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

from filelock import FileLock

from hostenv.dirs import cache_root

from testbed.errors import EnvironmentProblem

SOURCE = Path(__file__).with_name("cdi_hook.c")
NAME = "nvidia-cdi-hook"


class HookBuildError(EnvironmentProblem):
    """The hook did not compile; one line with the compiler's complaint."""


def ensure_cdi_hook() -> Path:
    """The built hook, compiled once per source version (concurrent callers wait for one build)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:12]
    out = cache_root() / "nvidia-cdi-hook" / digest
    binary = out / NAME
    out.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(out) + ".lock"):
        if binary.is_file():
            return binary
        partial = out.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        partial.mkdir()
        cc = os.environ.get("CC", "gcc")
        proc = subprocess.run([cc, "-O2", "-static", "-Wall", "-Wextra", "-Wno-format-truncation", "-o", str(partial / NAME), str(SOURCE)],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            shutil.rmtree(partial, ignore_errors=True)
            raise HookBuildError(f"{cc} {SOURCE.name} failed: {(proc.stderr.strip().splitlines() or ['no output'])[-1]}")
        shutil.rmtree(out, ignore_errors=True)
        partial.rename(out)
    return binary
