"""Namespaces for tests and workloads, ready for pods."""

from __future__ import annotations

from typing import Any, Callable

from kubernetes import client

from testbed.kube.waiting import wait_for


def create_namespace(core: client.CoreV1Api, name: str, labels: dict[str, str] | None = None, timeout: float = 60.0,
                     within: Callable[[Callable[[float], Any], float], Any] | None = None) -> None:
    """Create namespace `name` and return once its default ServiceAccount exists.

    The API server refuses pods in a namespace until the controller-manager has created that account,
    which happens asynchronously (and late while the controller-manager is still starting). `within(wait,
    timeout)` runs the wait if given (a fault campaign's runner extends it by the time components were down)."""
    core.create_namespace(body={"metadata": {"name": name, "labels": labels or {}}})

    def wait(left: float) -> Any:
        return wait_for(core.list_namespaced_service_account, lambda _: True, namespace=name, name="default", timeout=left,
                        what=f"the default service account of namespace {name}")

    (within or (lambda run, limit: run(limit)))(wait, timeout)
