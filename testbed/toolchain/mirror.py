"""A local mirror of the official release downloads, laid out from the cache.

Sites without internet access serve such a directory over HTTP and point `--mirror` (or the
DRA_TESTBED_*_DOWNLOAD_URL variables) at it; the test suite uses one to prove the download path.
"""

from __future__ import annotations

import hashlib
import io
import os
import tarfile
from pathlib import Path
from urllib.parse import urlsplit

from hostenv.versions import Release
from testbed.toolchain.projects import PROJECTS
from testbed.toolchain.store import CachedRelease, sha256_of

MIRROR_BASE = "http://mirror.invalid"  # placeholder host: only the URL paths matter for the layout


def _relative(url: str) -> Path:
    return Path(urlsplit(url).path.lstrip("/"))


def write_mirror(release: Release, dest: Path, projects: tuple[str, ...] = tuple(PROJECTS), cache_root: Path | None = None) -> list[Path]:
    """Lay out the release files of `projects` under `dest` as the official hosts publish them.

    Bare binaries are symlinked from the cache (no copy); archives and checksum files are written.
    Returns the files written. Every project must be cached already.
    """
    bases = {"k8s": MIRROR_BASE, "github": MIRROR_BASE}
    written: list[Path] = []
    for name in projects:
        project = PROJECTS[name]
        version = release.project_version(name)
        slot = CachedRelease.at(name, version, cache_root)
        if slot.problems():
            raise FileNotFoundError(f"{name} {version} is not cached; run `dra-testbed toolchain ensure --k8s {release.minor}` first")
        assert project.download is not None
        archives: dict[Path, dict[str, Path]] = {}
        for binary in project.binaries:
            spec = project.download(binary, version, bases)
            target = dest / _relative(spec.url)
            target.parent.mkdir(parents=True, exist_ok=True)
            if spec.member:
                archives.setdefault(target, {})[spec.member] = slot.path(binary)
                continue
            if target.is_symlink() or target.exists():
                target.unlink()
            os.symlink(slot.path(binary), target)
            written.append(target)
            if spec.checksum_url:
                digest = sha256_of(slot.path(binary))
                checksum = dest / _relative(spec.checksum_url)
                checksum.write_text(f"{digest}  {target.name}\n" if checksum.suffix == ".sha256sum" else digest + "\n")
                written.append(checksum)
        for archive, members in archives.items():
            buffer = io.BytesIO()
            with tarfile.open(fileobj=buffer, mode="w:gz", compresslevel=1) as tar:
                for member, source in members.items():
                    tar.add(source, arcname=member)
            archive.write_bytes(buffer.getvalue())
            written.append(archive)
            sums = archive.parent / "SHA256SUMS"
            sums.write_text(f"{hashlib.sha256(buffer.getvalue()).hexdigest()}  {archive.name}\n")
            written.append(sums)
    return written
