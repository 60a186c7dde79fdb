"""The readiness endpoint of the driver's DaemonSet containers: GET /readyz answers 200 while the
container does its job and 503 with the reason when it does not.

The kubelet probes it (an httpGet readinessProbe), so a pod is Ready only while its kubelet plugin is
registered with the kubelet and serving on both sockets, and its publisher has the node's slices in the
API; a rollout of the DaemonSet waits for that, not for a process that merely runs.
"""

from __future__ import annotations

import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Callable

PATH = "/readyz"

# The reason the container is not ready, or None when it is.
NotReady = Callable[[], "str | None"]


class ReadyServer:
    """Serves PATH on `port` (all addresses) from a daemon thread; stop() closes it."""

    def __init__(self, port: int, not_ready: NotReady) -> None:
        check = not_ready

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                if self.path.split("?")[0] != PATH:
                    self._answer(404, f"only {PATH} is served\n")
                    return
                try:
                    reason = check()
                except Exception as exc:  # noqa: BLE001 - a check that breaks means not ready, with why
                    reason = f"readiness check failed: {type(exc).__name__}: {exc}"
                self._answer(200, "ok\n") if reason is None else self._answer(503, reason + "\n")

            def _answer(self, code: int, body: str) -> None:
                data = body.encode()
                self.send_response(code)
                self.send_header("Content-Type", "text/plain; charset=utf-8")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:  # one probe every few seconds: not worth a log line
                pass

        self._server = ThreadingHTTPServer(("", port), Handler)
        self._server.daemon_threads = True
        self.port = self._server.server_address[1]
        self._thread = threading.Thread(target=self._server.serve_forever, name="readyz", daemon=True)

    def start(self) -> "ReadyServer":
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
