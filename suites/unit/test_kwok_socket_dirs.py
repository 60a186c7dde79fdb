"""Our plugins' socket directories (testbed.drivers.ours.kwok) live in the shared temporary directory, outside
the cluster's home: removing a node's must not leave the cluster's socket root behind, empty, in /tmp."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from testbed.drivers.ours.kwok import plugin_dir, remove_plugin_dirs, remove_socket_root, socket_root


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cluster home whose socket root is under tmp_path, not the machine's /tmp."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    return tmp_path / "home"


def _plugin_ran(home: Path, node: str) -> None:
    """The directories a plugin of `node` makes at start, with a file in each (its socket, its checkpoint)."""
    for where in (plugin_dir(home, node), plugin_dir(home, node).with_name("registry")):
        where.mkdir(parents=True)
        (where / "file").write_text("x")


def test_removing_the_last_nodes_plugin_dirs_removes_the_socket_root(home: Path) -> None:
    _plugin_ran(home, "gpu-0")
    _plugin_ran(home, "gpu-1")
    remove_plugin_dirs(home, "gpu-0")
    assert not plugin_dir(home, "gpu-0").parent.exists() and plugin_dir(home, "gpu-1").is_dir()  # gpu-1's untouched
    remove_plugin_dirs(home, "gpu-1")
    assert not socket_root(home).exists() and not socket_root(home).parent.exists()  # no cluster's left: shared dir too


def test_a_stopped_clusters_socket_root_goes_and_the_shared_folder_with_the_last(home: Path, tmp_path: Path) -> None:
    # after every KWOK bed of a session was down, /tmp/dra-testbed-ours was still there, empty
    other = tmp_path / "other-home"
    _plugin_ran(home, "gpu-0")
    _plugin_ran(other, "gpu-0")
    remove_socket_root(home)
    assert not socket_root(home).exists() and socket_root(other).is_dir()  # the other cluster's is untouched
    remove_socket_root(other)
    assert not socket_root(other).parent.exists() and socket_root(other).parent.parent.is_dir()


def test_removing_a_node_that_has_none_is_a_no_op(home: Path) -> None:
    remove_plugin_dirs(home, "gpu-0")
    _plugin_ran(home, "gpu-1")
    remove_plugin_dirs(home, "gpu-0")
    assert plugin_dir(home, "gpu-1").is_dir()


def test_nvidias_plugins_leave_no_shared_socket_folder_either(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # /tmp/dra-testbed-nvidia was left empty after the NVIDIA suites, as dra-testbed-ours was after ours
    from testbed.drivers.nvidia.plugin import NodePlugin, remove

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    plugins = [NodePlugin(node, tmp_path / "cluster" / "nvidia" / node, None) for node in ("gpu-0", "gpu-1")]
    for plugin in plugins:
        plugin.plugins_dir.mkdir(parents=True)
        plugin.home.mkdir(parents=True)
    remove(plugins[0])
    assert not plugins[0].socket_root.exists() and plugins[1].plugins_dir.is_dir()
    remove(plugins[1])
    assert not plugins[1].socket_root.parent.exists() and (tmp_path / "tmp").is_dir()
