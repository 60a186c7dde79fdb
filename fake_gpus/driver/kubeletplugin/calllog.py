"""An opt-in log of the gRPC calls the kubelet plugin serves, one JSON line per call.

`$FAKE_GPUS_PLUGIN_CALL_LOG=FILE` turns it on; a relative FILE is taken inside the plugin directory
(`--plugin-dir`), so one setting gives every node's plugin a log of its own on either backend (on kind that
directory is the node's `/var/lib/kubelet/plugins/<driver>`, a hostPath). Unset, the plugin does nothing
more than test one attribute per call. A line holds the method, the service version, the claims of the
request, the node and `time.monotonic()`; it is what a caller asked, recorded before the plugin acts on it.
The plugin's own readiness check calls GetInfo too: such calls carry SELF_CHECK metadata and are left out.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping

CALL_LOG_ENV = "FAKE_GPUS_PLUGIN_CALL_LOG"
SELF_CHECK = ("dra-testbed-self-check", "1")  # gRPC metadata of the plugin's own readiness calls


@dataclass(frozen=True)
class Call:
    """One logged call: `claims` as (namespace, name, uid) in request order; `registered` for NotifyRegistrationStatus."""

    method: str
    service: str
    claims: tuple[tuple[str, str, str], ...] = ()
    node: str = ""
    t: float = 0.0
    registered: bool | None = None


class CallLog:
    """Appends calls to one file; each line is one write(2) with O_APPEND, so concurrent calls never interleave."""

    def __init__(self, path: Path, node: str) -> None:
        self.path = path
        self.node = node

    @classmethod
    def from_env(cls, plugin_dir: Path, node: str, environ: Mapping[str, str] | None = None) -> CallLog | None:
        """The log $CALL_LOG_ENV (of `environ`, else this process's) asks for (relative: inside `plugin_dir`),
        or None when it is unset."""
        where = (os.environ if environ is None else environ).get(CALL_LOG_ENV, "")
        if not where:
            return None
        path = plugin_dir / where
        path.parent.mkdir(parents=True, exist_ok=True)
        return cls(path, node)

    def record(self, method: str, service: str, claims=(), registered: bool | None = None) -> None:
        """Log a call; `claims` are the request's messages (namespace, name, uid attributes)."""
        entry = {"t": time.monotonic(), "node": self.node, "method": method, "service": service,
                 "claims": [{"namespace": c.namespace, "name": c.name, "uid": c.uid} for c in claims]}
        if registered is not None:
            entry["registered"] = registered
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, (json.dumps(entry) + "\n").encode())
        finally:
            os.close(fd)


def parse_calls(text: str) -> list[Call]:
    """The calls of a log's text, in file order; a line that does not parse (a plugin killed mid-write) is skipped."""
    calls = []
    for line in text.splitlines():
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        claims = tuple((c["namespace"], c["name"], c["uid"]) for c in entry.get("claims") or [])
        calls.append(Call(entry["method"], entry["service"], claims, entry.get("node", ""), entry.get("t", 0.0), entry.get("registered")))
    return calls
