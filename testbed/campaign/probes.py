"""Whether a restarted component serves again, asked the way its own health checks are (kubeadm's probes).

A process that runs is not yet a component that serves: a kube-apiserver takes seconds to a minute under
load before /readyz answers, and etcd's clients reconnect after it answers /health. The campaign's
downtime of a kill runs until these say ok.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable

from testbed.host.health import http_ok

def flag(argv: list[str], name: str) -> str | None:
    """The value of `--name=value` (or `--name value`) in a command line."""
    for i, arg in enumerate(argv):
        if arg.startswith(f"--{name}="):
            return arg.split("=", 1)[1]
        if arg == f"--{name}" and i + 1 < len(argv):
            return argv[i + 1]
    return None


def serving_url(argv: list[str]) -> str | None:
    """A kube component's health URL from its command line: etcd's /health, the others' /readyz."""
    clients = flag(argv, "listen-client-urls")
    if clients:
        return clients.split(",")[0].rstrip("/") + "/health"
    port = flag(argv, "secure-port")
    if port:
        return f"https://{flag(argv, 'bind-address') or '127.0.0.1'}:{port}/readyz"
    return None


def all_of(*probes: Callable[[], bool]) -> Callable[[], bool]:
    return lambda: all(p() for p in probes)


def url_probe(argv: list[str]) -> Callable[[], bool] | None:
    url = serving_url(argv)
    return (lambda: http_ok(url)) if url else None


def ready_file_probe(ready_file: Path, pid_file: Path) -> Callable[[], bool]:
    """A process that writes its pid to `ready_file` once it has done its start-up work (our publisher)."""
    def ready() -> bool:
        try:
            return ready_file.read_text().strip() == pid_file.read_text().strip()
        except OSError:
            return False
    return ready
