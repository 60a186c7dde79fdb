"""An API client that rides out a control-plane restart: idempotent retries of every call.

While the apiserver or etcd restarts, a call is refused (connection refused), cut off (connection
reset, read error, a TLS session cut mid-handshake or mid-answer) or answered 429/500/502/503/504. `RetryingApiClient` retries such a call with a
short backoff until `budget` seconds have passed, as client-go's retrying transports do. A retry must
not turn one request into two outcomes: a create (POST) that may have reached the server before it
failed and is then answered 409 AlreadyExists is answered with the object that exists; a DELETE
answered 404 after such an attempt counts as done. Everything else a server says (4xx) is returned
unchanged.
"""

from __future__ import annotations

import json
import time
from typing import Any, Callable

import urllib3
from kubernetes import client, config
from kubernetes.client import rest

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
DEFAULT_BUDGET = 180.0  # seconds a call may wait for the control plane to come back


class RetryingApiClient(client.ApiClient):
    """`client.ApiClient` whose calls are retried through control-plane restarts; `retries` counts them."""

    def __init__(self, configuration: client.Configuration | None = None, budget: float = DEFAULT_BUDGET,
                 on_retry: Callable[[str, str], None] | None = None) -> None:
        configuration = configuration or client.Configuration.get_default_copy()
        configuration.retries = False  # urllib3's own quiet retries would hide what a lost answer was
        super().__init__(configuration)
        self.budget = budget
        self.retries = 0
        self.on_retry = on_retry

    def call_api(self, method, url, header_params=None, body=None, post_params=None, _request_timeout=None) -> rest.RESTResponse:
        deadline = time.monotonic() + self.budget
        delay, ambiguous = 0.2, False
        while True:
            reason = None
            try:
                response = super().call_api(method, url, header_params, body, post_params, _request_timeout)
            except (urllib3.exceptions.HTTPError, rest.ApiException) as exc:
                if isinstance(exc, rest.ApiException) and exc.status != 0:
                    raise  # the server's own answer, not a lost one
                # a refused connection never sent the request; anything later may have reached the server.
                # The client wraps a TLS connection the apiserver cut (it was killed) as ApiException status 0.
                refused = isinstance(getattr(exc, "reason", exc), urllib3.exceptions.NewConnectionError)
                ambiguous = ambiguous or not refused
                reason = "SSLError" if isinstance(exc, rest.ApiException) else type(exc).__name__
                if time.monotonic() + delay > deadline:
                    raise
            else:
                if ambiguous and method == "POST" and response.status == 409:
                    return self._existing(url, header_params, body, _request_timeout) or response
                if ambiguous and method == "DELETE" and response.status == 404:
                    _discard(response)
                    return _done()
                if response.status not in RETRY_STATUSES or time.monotonic() + delay > deadline:
                    return response
                reason = f"HTTP {response.status}"
                ambiguous = ambiguous or method not in ("GET", "HEAD")
                _discard(response)
            self.retries += 1
            if self.on_retry:
                self.on_retry(method, reason)
            time.sleep(delay)
            delay = min(delay * 2, 2.0)

    def _existing(self, url: str, header_params, body, timeout) -> rest.RESTResponse | None:
        """The object a create made before its answer was lost (its collection URL plus its name)."""
        name = (body or {}).get("metadata", {}).get("name") if isinstance(body, dict) else None
        if not name:
            return None
        base, _, query = url.partition("?")
        response = self.call_api("GET", f"{base.rstrip('/')}/{name}", header_params, None, None, timeout)
        return response if response.status == 200 else None


def _discard(response: rest.RESTResponse) -> None:
    try:
        response.response.release_conn()
    except Exception:  # noqa: BLE001 - a broken connection has nothing to release
        pass


def _done() -> rest.RESTResponse:
    """A 200 with an empty Status: what a DELETE that already happened is answered with."""
    body = json.dumps({"kind": "Status", "apiVersion": "v1", "status": "Success"}).encode()
    return rest.RESTResponse(urllib3.HTTPResponse(body=body, status=200, headers={"Content-Type": "application/json"},
                                                  preload_content=False))


def retrying_client(kubeconfig: str, budget: float = DEFAULT_BUDGET, **kwargs: Any) -> RetryingApiClient:
    """A RetryingApiClient for the cluster of `kubeconfig`."""
    configuration = type.__call__(client.Configuration)
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)
    return RetryingApiClient(configuration, budget, **kwargs)
