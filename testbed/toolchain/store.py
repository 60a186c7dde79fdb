"""The on-disk cache of binaries: one directory per project and version, sealed by a manifest.

A release directory is complete only once its `manifest.json` exists; the manifest records every
binary's size and SHA-256, so a truncated or altered file is found and the release rebuilt.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path

from filelock import FileLock

from hostenv.dirs import cache_root

MANIFEST = "manifest.json"
# Files whose size and mtime still match what was verified are not hashed again: hashing
# ~400 MB of binaries on every `up` would cost seconds.
_VERIFIED = ".verified.json"


def sha256_of(path: Path) -> str:
    """Hex SHA-256 of a file."""
    digest = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def _fingerprint(path: Path) -> list[int]:
    st = path.stat()
    return [st.st_size, st.st_mtime_ns, st.st_ino]


@dataclass(frozen=True)
class CachedRelease:
    """The cache slot of one project release, e.g. kubernetes v1.34.4."""

    project: str
    version: str
    root: Path

    @classmethod
    def at(cls, project: str, version: str, root: Path | None = None) -> "CachedRelease":
        base = (root or cache_root() / "toolchain") / project / version
        return cls(project, version, base)

    def lock(self) -> FileLock:
        """The lock that serialises builds and downloads of this release across processes."""
        self.root.parent.mkdir(parents=True, exist_ok=True)
        return FileLock(str(self.root.parent / f"{self.version}.lock"))

    def manifest(self) -> dict | None:
        """The sealed manifest, or None when the release is absent or was never completed."""
        try:
            return json.loads((self.root / MANIFEST).read_text())
        except (OSError, ValueError):
            return None

    def path(self, binary: str) -> Path:
        return self.root / binary

    def problems(self) -> list[str]:
        """What is wrong with the cached release; empty when every binary matches its manifest."""
        manifest = self.manifest()
        if manifest is None:
            return [f"{self.root} holds no complete release"]
        verified_file = self.root / _VERIFIED
        try:
            verified = json.loads(verified_file.read_text())
        except (OSError, ValueError):
            verified = {}
        problems: list[str] = []
        fresh: dict[str, list[int]] = {}
        for binary, entry in manifest["binaries"].items():
            path = self.path(binary)
            if not path.is_file():
                problems.append(f"{path} is missing")
                continue
            fingerprint = _fingerprint(path)
            if verified.get(binary) == fingerprint:
                fresh[binary] = fingerprint
                continue
            if path.stat().st_size != entry["size"] or sha256_of(path) != entry["sha256"]:
                problems.append(f"{path} does not match its recorded SHA-256 (corrupted)")
                continue
            fresh[binary] = fingerprint
        if not problems and fresh != verified:
            tmp = verified_file.with_suffix(".tmp")
            tmp.write_text(json.dumps(fresh))
            tmp.replace(verified_file)
        return problems

    def staging_dir(self) -> Path:
        """An empty directory beside the slot to assemble a release in before sealing it."""
        staging = self.root.parent / f".{self.version}.staging-{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir(parents=True)
        return staging

    def seal(self, staging: Path, origin: str) -> None:
        """Record every binary of `staging` in a manifest and move it into place atomically."""
        binaries = {}
        for path in sorted(staging.iterdir()):
            if path.is_file() and not path.name.startswith("."):
                path.chmod(0o755)
                binaries[path.name] = {"size": path.stat().st_size, "sha256": sha256_of(path)}
        manifest = {"project": self.project, "version": self.version, "origin": origin, "binaries": binaries}
        (staging / MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
        self.evict()
        staging.rename(self.root)

    def evict(self) -> None:
        """Remove the slot (a corrupt or partial release)."""
        if self.root.exists():
            shutil.rmtree(self.root)

    def disk_usage(self) -> int:
        """Bytes used by the slot."""
        return sum(p.stat().st_size for p in self.root.rglob("*") if p.is_file()) if self.root.exists() else 0
