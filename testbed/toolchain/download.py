"""Fetching official release binaries (or a mirror's copy of them) with checksum verification."""

from __future__ import annotations

import hashlib
import io
import os
import socket
import tarfile
import threading
import urllib.error
import urllib.request
from pathlib import Path
from typing import Callable
from urllib.parse import urlsplit

from testbed.errors import EnvironmentProblem
from testbed.toolchain.projects import DownloadSpec

OFFLINE_ENV = "DRA_TESTBED_OFFLINE"
PROBE_TIMEOUT = 3.0
READ_TIMEOUT = 60.0


class DownloadError(EnvironmentProblem):
    """A release file could not be fetched or did not match its checksum."""


def downloads_disabled() -> bool:
    """True when the user asked for no download attempt at all (DRA_TESTBED_OFFLINE=1)."""
    return os.environ.get(OFFLINE_ENV, "").lower() in ("1", "true", "yes")


def reachable(url: str, timeout: float = PROBE_TIMEOUT) -> bool:
    """Whether the host of `url` resolves and accepts a TCP connection within `timeout` seconds.

    Name resolution runs in a thread because getaddrinfo has no timeout of its own.
    """
    parts = urlsplit(url)
    host = parts.hostname
    if not host:
        return False
    port = parts.port or (443 if parts.scheme == "https" else 80)
    result: list = []

    def resolve() -> None:
        try:
            result.append(socket.getaddrinfo(host, port, type=socket.SOCK_STREAM))
        except OSError:
            pass

    worker = threading.Thread(target=resolve, daemon=True)
    worker.start()
    worker.join(timeout)
    if not result:
        return False
    family, kind, proto, _, address = result[0][0]
    with socket.socket(family, kind, proto) as sock:
        sock.settimeout(timeout)
        try:
            sock.connect(address)
        except OSError:
            return False
    return True


def _get(url: str, progress: Callable[[int, int | None], None] | None = None) -> bytes:
    try:
        with urllib.request.urlopen(url, timeout=READ_TIMEOUT) as response:
            total = response.length
            buffer = io.BytesIO()
            while chunk := response.read(1 << 20):
                buffer.write(chunk)
                if progress:
                    progress(buffer.tell(), total)
            return buffer.getvalue()
    except (urllib.error.URLError, OSError) as exc:
        raise DownloadError(f"cannot download {url}: {exc}") from exc


def _expected_digest(checksum_text: str, filename: str) -> str:
    """The digest for `filename` from a bare-digest file or `sha256sum`-style lines."""
    for line in checksum_text.splitlines():
        fields = line.split()
        if len(fields) == 1 and len(fields[0]) == 64:
            return fields[0].lower()
        if len(fields) >= 2 and fields[-1].lstrip("*").split("/")[-1] == filename:
            return fields[0].lower()
    raise DownloadError(f"no SHA-256 for {filename} in its checksum file")


def fetch_binary(spec: DownloadSpec, dest: Path, progress: Callable[[int, int | None], None] | None = None) -> None:
    """Download the binary `spec` names into `dest`, verifying the published checksum when there is one."""
    payload = _get(spec.url, progress)
    filename = spec.url.rsplit("/", 1)[-1]
    if spec.checksum_url:
        want = _expected_digest(_get(spec.checksum_url).decode(errors="replace"), filename)
        got = hashlib.sha256(payload).hexdigest()
        if got != want:
            raise DownloadError(f"{spec.url}: SHA-256 {got} does not match the published {want}")
    if spec.member:
        try:
            with tarfile.open(fileobj=io.BytesIO(payload), mode="r:gz") as archive:
                member = archive.extractfile(spec.member)
                if member is None:
                    raise KeyError(spec.member)
                payload = member.read()
        except (tarfile.TarError, KeyError) as exc:
            raise DownloadError(f"{spec.url}: archive has no {spec.member}") from exc
    dest.write_bytes(payload)
    dest.chmod(0o755)
