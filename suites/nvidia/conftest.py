"""Fixtures for the suites that run NVIDIA's own gpu-kubelet-plugin on the fake boards.

The binary comes from $DRA_TESTBED_NVIDIA_PLUGIN (CI sets it to ../shared/vendor/...); without it
these tests fail with one line saying how to provide it, never skip.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from testbed.clusters.layout import NodeSpec, parse_mode
from testbed.drivers.nvidia import nodes, plugin
from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary
from testbed.pytest.plugin import TestBed


@pytest.fixture(scope="session")
def nvidia_binary() -> Path:
    try:
        return plugin_binary()
    except PluginNotFound as exc:
        pytest.fail(str(exc), pytrace=False)


@contextmanager
def node_factory(testbed: TestBed, binary: Path) -> Iterator[Callable[..., plugin.NodePlugin]]:
    """make(board, count, mode, mig_layout=None, gates=()) -> a fresh node of `testbed` served by NVIDIA's
    plugin (with more feature gates `gates`); every node made is removed, with its plugin and files, on exit."""
    home = Path(tempfile.mkdtemp(prefix="nv-"))
    started: list[plugin.NodePlugin] = []

    def make(board: str, count: int, mode: str, mig_layout: dict[str, int] | None = None,
             gates: tuple[str, ...] = ()) -> plugin.NodePlugin:
        name = f"nv-{uuid.uuid4().hex[:6]}"
        spec = NodeSpec(name, board, count, parse_mode(mode, name))
        started.append(nodes.start_node(testbed.api, home, testbed.kubeconfig, spec, binary, mig_layout, gates=gates))
        return started[-1]

    try:
        yield make
    finally:
        for p in started:
            nodes.remove_node(testbed.api, p)
        shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
def nvidia_node(testbed: TestBed, nvidia_binary: Path) -> Iterator[Callable[..., plugin.NodePlugin]]:
    """nvidia_node(board, count, mode, mig_layout=None, gates=()) -> a fresh KWOK node served by NVIDIA's plugin."""
    with node_factory(testbed, nvidia_binary) as make:
        yield make
