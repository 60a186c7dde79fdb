"""StateChanges: which nodes' state files changed, from the kernel's inotify events, with polling as the fallback."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from fake_gpus.driver.publisher import STATE_FILES
from fake_gpus.driver.state_changes import StateChanges


def replace(directory: Path, name: str, text: str) -> None:
    """As the fake NVML writes its state: a new file renamed over the old one."""
    tmp = directory / f".{name}.tmp"
    tmp.write_text(text)
    tmp.rename(directory / name)


@pytest.fixture
def nodes(tmp_path: Path) -> tuple[StateChanges, dict[str, Path]]:
    dirs = {}
    for node in ("a", "b"):
        dirs[node] = tmp_path / node
        dirs[node].mkdir()
        for name in STATE_FILES:
            (dirs[node] / name).write_text("{}")
    changes = StateChanges(STATE_FILES)
    assert changes.fd is not None, "inotify is part of every Linux kernel this project runs on"
    for node, directory in dirs.items():
        changes.watch(node, directory)
    yield changes, dirs
    changes.close()


def test_reports_the_node_whose_state_file_was_replaced_once(nodes) -> None:
    changes, dirs = nodes
    assert changes.changed() == set()
    replace(dirs["b"], "mig", '{"gpu_instances": []}')
    assert changes.changed() == {"b"}
    assert changes.changed() == set()
    (dirs["a"] / "gpus").write_text("[]")  # written in place
    assert changes.changed() == {"a"}


def test_other_files_in_the_directory_are_not_state(nodes) -> None:
    changes, dirs = nodes
    (dirs["a"] / "lock").write_text("")  # the library's lock, opened for writing on every call
    (dirs["a"] / "proc").mkdir()
    assert changes.changed() == set()


def test_a_node_without_a_directory_is_polled_until_watched(tmp_path: Path, nodes) -> None:
    changes, _ = nodes
    late = tmp_path / "late"
    changes.watch("late", late)
    assert changes.changed() == {"late"}
    assert changes.changed() == {"late"}
    late.mkdir()
    changes.watch("late", late)
    assert changes.changed() == set()


def test_a_directory_removed_is_reported_then_polled_and_watched_again_when_remade(nodes) -> None:
    changes, dirs = nodes
    shutil.rmtree(dirs["a"])
    assert changes.changed() == {"a"}
    assert changes.changed() == {"a"}  # no watch on a directory that is not there
    dirs["a"].mkdir()  # a fresh provision makes it anew, then sync watches it again
    changes.watch("a", dirs["a"])
    assert changes.changed() == set()
    replace(dirs["a"], "gpus", "[]")
    assert changes.changed() == {"a"}


def test_a_directory_remade_before_the_next_poll_is_watched_anew(nodes) -> None:
    changes, dirs = nodes
    shutil.rmtree(dirs["a"])  # provision(fresh=True), then sync() watches it again, all between two polls
    dirs["a"].mkdir()
    changes.watch("a", dirs["a"])
    changes.changed()  # the old directory's removal: checked once
    assert changes.changed() == set()
    replace(dirs["a"], "gpus", "[]")
    assert changes.changed() == {"a"}


def kernel_watches(changes: StateChanges) -> int:
    return Path(f"/proc/self/fdinfo/{changes.fd}").read_text().count("inotify wd:")


def test_a_directory_moved_away_is_no_longer_watched(tmp_path: Path, nodes) -> None:
    changes, dirs = nodes
    moved = tmp_path / "moved"
    dirs["a"].rename(moved)
    dirs["a"].mkdir()
    changes.watch("a", dirs["a"])  # before the next poll: the old watch (following the moved one) goes now
    assert kernel_watches(changes) == 2
    changes.changed()
    replace(moved, "gpus", "[]")  # not the node's directory any more
    assert changes.changed() == set()
    replace(dirs["a"], "gpus", "[]")
    assert changes.changed() == {"a"}
    assert kernel_watches(changes) == 2


def test_a_node_unwatched_is_never_reported(nodes) -> None:
    changes, dirs = nodes
    replace(dirs["a"], "gpus", "[]")
    changes.unwatch("a")
    replace(dirs["a"], "mig", "{}")
    assert changes.changed() == set()


def test_an_overflowed_event_queue_reports_every_node(nodes) -> None:
    changes, dirs = nodes
    limit = int(Path("/proc/sys/fs/inotify/max_queued_events").read_text())
    for i in range(limit + 10):  # one IN_CLOSE_WRITE each, alternating files so the kernel cannot merge them
        os.close(os.open(dirs["a"] / ("lock", "other")[i % 2], os.O_WRONLY | os.O_CREAT))
    replace(dirs["b"], "gpus", "[]")  # lost with the overflow
    assert changes.changed() == {"a", "b"}
    assert changes.changed() == set()


def test_closed_polls_every_node(nodes) -> None:
    changes, _ = nodes
    changes.close()
    assert changes.changed() == {"a", "b"}
    assert changes.changed() == {"a", "b"}
