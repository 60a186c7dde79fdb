"""Per-node credentials of the driver on KWOK: the driver's service-account token, bound to each Node.

On kind, a node's driver pod authenticates with its service account's token, which the kubelet requests
bound to the pod, so the token names the pod's node (user extra `authentication.kubernetes.io/node-name`)
and the ValidatingAdmissionPolicy holds the pod's writes to that node's slices. KWOK nodes run no pods,
so the KWOK publisher, playing each node's kubelet, requests for every node the same service account's
token bound to the Node object itself (TokenRequest with boundObjectRef kind Node). The API server signs
it, it names that node in the same extra field, and it stops being valid when that Node is deleted: a
credential of one node, checked by the API server on every request, that the same policy holds to that
node's slices. Unlike per-node client certificates (a TLS connection per node) or impersonation (one
credential that may claim any node), a token is a header: every node's writes share one connection pool.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass
from datetime import datetime

from kubernetes import client

from fake_gpus.driver import rest

LIFETIME_SECONDS = 24 * 3600
RENEW_FRACTION = 0.8  # a token is renewed once this share of its lifetime has passed


@dataclass(frozen=True)
class NodeIdentity:
    """The service account whose Node-bound tokens the nodes' drivers use."""

    namespace: str
    service_account: str


@dataclass
class _Token:
    uid: str
    bearer: str
    renew_at: float


def anonymous_client(api: client.ApiClient) -> client.ApiClient:
    """A client of the same server that presents no credential: no client certificate (the API server would
    authenticate it before any token), no token. One pool, shared by every node's requests."""
    source = api.configuration
    cfg = client.Configuration()
    cfg.host, cfg.ssl_ca_cert, cfg.verify_ssl = source.host, source.ssl_ca_cert, source.verify_ssl
    cfg.connection_pool_maxsize = source.connection_pool_maxsize
    return client.ApiClient(cfg)


class NodeTokens:
    """Node name -> a bearer token of `identity` bound to that Node, requested on first use, renewed before
    it expires and again when a node of the same name but another uid appears. Thread-safe: the
    publisher's write pool asks for tokens of many nodes at once, each requested once."""

    def __init__(self, api: client.ApiClient, identity: NodeIdentity, lifetime: int = LIFETIME_SECONDS) -> None:
        self.owner = api  # the machine's own credential requests the tokens
        self.api = anonymous_client(api)  # the nodes' requests: no credential of its own, each carries its token
        self.identity = identity
        self.lifetime = lifetime
        self._tokens: dict[str, _Token] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()
        self.requested = 0  # token requests made (benchmarks report it)

    def bearer(self, node: str, uid: str | None) -> str:
        """`Bearer <token>` for `node` (uid None: whichever token it holds, e.g. for a node already gone)."""
        with self._guard:
            lock = self._locks.setdefault(node, threading.Lock())
        with lock:
            token = self._tokens.get(node)
            if token is None or (uid is not None and token.uid != uid) or time.monotonic() >= token.renew_at:
                if uid is None:
                    uid = token.uid if token else rest.request(self.owner, "GET", f"/api/v1/nodes/{node}")["metadata"]["uid"]
                token = self._request(node, uid)
                self._tokens[node] = token
            return f"Bearer {token.bearer}"

    def forget(self, node: str) -> None:
        """Drop a node's token (the node went; its token is worthless now)."""
        with self._guard:
            self._tokens.pop(node, None)
            self._locks.pop(node, None)

    def _request(self, node: str, uid: str) -> _Token:
        started = time.monotonic()
        review = rest.create(
            self.owner, f"/api/v1/namespaces/{self.identity.namespace}/serviceaccounts/{self.identity.service_account}/token",
            {"apiVersion": "authentication.k8s.io/v1", "kind": "TokenRequest",
             "spec": {"expirationSeconds": self.lifetime,
                      "boundObjectRef": {"apiVersion": "v1", "kind": "Node", "name": node, "uid": uid}}})
        self.requested += 1
        expires = datetime.fromisoformat(review["status"]["expirationTimestamp"])  # RFC 3339, e.g. ...T19:00:00Z
        granted = expires.timestamp() - time.time()  # the server may shorten it
        return _Token(uid, review["status"]["token"], started + max(granted, 60.0) * RENEW_FRACTION)
