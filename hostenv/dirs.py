"""Where dra-testbed keeps what it builds and downloads, and where clusters keep their state."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

SHARED_ENV = "DRA_TESTBED_SHARED"


def cache_root() -> Path:
    """The per-user cache directory: $DRA_TESTBED_CACHE, else $XDG_CACHE_HOME/dra-testbed, else ~/.cache/dra-testbed."""
    explicit = os.environ.get("DRA_TESTBED_CACHE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "dra-testbed"


def state_root() -> Path:
    """Where running clusters keep their files: $DRA_TESTBED_STATE, else ~/.local/state/dra-testbed."""
    explicit = os.environ.get("DRA_TESTBED_STATE")
    if explicit:
        return Path(explicit).expanduser()
    base = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(base) / "dra-testbed"


def shared_inputs() -> Path:
    """The folder of large test inputs kept beside the checkout, never in it (trace data, NVIDIA's reference
    plugin): $DRA_TESTBED_SHARED, else `shared` next to the checkout this package was loaded from."""
    explicit = os.environ.get(SHARED_ENV)
    if explicit:
        return Path(explicit).expanduser()
    return Path(__file__).resolve().parents[2] / "shared"


def remove_tree(path: Path, empty_parents: int = 0) -> None:
    """Remove `path` and then up to `empty_parents` of its parents, innermost first, while they are left empty:
    short socket folders live under shared ones in the temporary directory, which nothing else cleans up."""
    shutil.rmtree(path, ignore_errors=True)
    for folder in list(path.parents)[:empty_parents]:
        try:
            folder.rmdir()
        except FileNotFoundError:
            continue
        except OSError:  # still holds another node's or cluster's folders
            return
