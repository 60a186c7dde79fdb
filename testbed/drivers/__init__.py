"""Drivers under test, one folder each (ours, nvidia, ...): importing this package registers every one of them.

A driver's folder registers a `DriverKind` (testbed.clusters.driver) in its `__init__` and holds, per backend
it runs on, the class that runs it there. Adding a driver means adding a folder here, nothing else: the
folders are found by listing this package, as entry points would be.
"""

from __future__ import annotations

import importlib
import pkgutil


def _load_all() -> None:
    for found in pkgutil.iter_modules(__path__):
        if found.ispkg:
            importlib.import_module(f"{__name__}.{found.name}")


_load_all()
