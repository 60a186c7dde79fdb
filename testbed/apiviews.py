"""Typed Kubernetes API groups over a client, for anything holding one as `api` (suites, the conformance subject)."""

from __future__ import annotations

from kubernetes import client


class ApiViews:
    """The typed API groups the suites use, over an `api` client attribute."""

    api: client.ApiClient

    @property
    def core(self) -> client.CoreV1Api:
        return client.CoreV1Api(self.api)

    @property
    def resource(self) -> client.ResourceV1Api:
        return client.ResourceV1Api(self.api)
