"""Fixtures for the suites that run NVIDIA's own gpu-kubelet-plugin on the fake boards.

The binary is found as testbed/drivers/nvidia/binary.py says (the explicit variable, the cache, the reference
binary beside the checkout, a build of the pinned commit); where none is found these tests fail with one
line saying how to provide it, never skip, in CI or not. suites/kind and suites/properties use
`required_plugin` too.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from contextlib import contextmanager
from pathlib import Path
from typing import Callable, Iterator

import pytest

from hostenv.dirs import SHARED_ENV
from testbed.clusters.layout import NodeSpec, parse_mode
from testbed.drivers.nvidia import nodes, plugin
from testbed.drivers.nvidia.binary import PLUGIN_ENV, PluginNotFound, find_plugin
from testbed.pytest.plugin import TestBed
from testbed.toolchain.download import OFFLINE_ENV


def required_plugin(config: pytest.Config) -> Path:
    """NVIDIA's plugin, with where it came from written to the terminal; the lookup's one line as a failure
    (an error in a fixture) where there is none: a missing test input is never a skip."""
    try:
        found = find_plugin()
    except PluginNotFound as exc:
        pytest.fail(str(exc), pytrace=False)
    reporter, capture = (config.pluginmanager.get_plugin(name) for name in ("terminalreporter", "capturemanager"))
    if reporter is not None and capture is not None:
        with capture.global_and_fixture_disabled():  # past the capture of the fixture's output, onto the terminal
            reporter.write_line(f"NVIDIA's gpu-kubelet-plugin: {found}")
    return found.path


def plugin_absent_env(empty: Path) -> dict[str, str]:
    """Variables under which the lookup finds nothing and tries no network: no variable, `empty` (a folder
    with nothing in it) as the cache and the shared inputs, offline. For checks of the one-line refusal."""
    return {PLUGIN_ENV: "", SHARED_ENV: str(empty), "DRA_TESTBED_CACHE": str(empty), OFFLINE_ENV: "1"}


@pytest.fixture(scope="session")
def nvidia_binary(request: pytest.FixtureRequest) -> Path:
    return required_plugin(request.config)


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
