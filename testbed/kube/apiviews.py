"""Typed Kubernetes API groups over a client, for anything holding one as `api` (suites, the conformance subject)."""

from __future__ import annotations

import os
import tempfile

from kubernetes import client, dynamic
from kubernetes.dynamic.discovery import LazyDiscoverer

# never created: discovery is kept in memory (see _InMemoryDiscoverer)
_NO_CACHE_FILE = os.path.join(tempfile.gettempdir(), "dra-testbed-discovery-kept-in-memory")


class _InMemoryDiscoverer(LazyDiscoverer):
    """The library's discoverer without its cache file. That file (/tmp/osrcp-<hash>.json) is keyed by the
    server's address: every run left one behind, and a later cluster on the same loopback port (another minor,
    other API versions) would start from this one's discovery."""

    def _write_cache(self) -> None:
        return None


def dynamic_client(api: client.ApiClient) -> dynamic.DynamicClient:
    """A dynamic client over `api` whose discovery lives and dies with it."""
    return dynamic.DynamicClient(api, cache_file=_NO_CACHE_FILE, discoverer=_InMemoryDiscoverer)


class ApiViews:
    """The typed API groups the suites use, over an `api` client attribute."""

    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api)
