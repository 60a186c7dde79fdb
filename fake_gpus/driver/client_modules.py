"""The Kubernetes client's modules the driver and `up` use, loaded ahead of first use.

The client itself costs some 0.6 s of CPU to import (its typed API classes far more: those paths call by path,
fake_gpus.driver.rest). Whoever waits for a control plane to start (the publisher, `up`) loads it meanwhile,
off its critical path; this module imports nothing of the client itself, so naming it costs nothing."""

from __future__ import annotations

import importlib

MODULES = ("kubernetes.config", "kubernetes.client.exceptions", "kubernetes.client.api.version_api")


def preload_api_modules(*extra: str) -> None:
    """Import the client, its API modules and the `extra` ones now (safe from a thread: imports take a lock per
    module)."""
    for module in (*MODULES, *extra):
        importlib.import_module(module)
