"""The driver image is made of the driver packages only: editing the test bed neither enters it nor
changes its tag (testbed/images/extra.py: driver_sources, driver_reference)."""

from __future__ import annotations

import shutil
from pathlib import Path

from testbed.clusters.kind import driver_image as extra

REPO = Path(__file__).resolve().parents[2]


def test_driver_sources_hold_no_testbed_file():
    sources = extra.driver_sources(REPO)
    files = [f for s in sources for f in ([s] if s.is_file() else s.rglob("*"))]
    assert any(f.name == "publisher.py" for f in files)  # the driver is in it
    assert [f for f in files if (REPO / "testbed") in f.parents] == []
    assert set(extra.DRIVER_PACKAGES) == {"fake_gpus", "hostenv"}


def _copy(tmp_path: Path) -> Path:
    for package in ("fake_gpus", "hostenv", "testbed"):
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy2(REPO / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_tag_ignores_testbed_edits_and_follows_driver_edits(tmp_path: Path):
    root = _copy(tmp_path)
    before = extra.driver_reference("base:1", [], root)
    with (root / "testbed" / "workloads" / "runner.py").open("a") as f:
        f.write("\n# an edit of the test harness\n")
    assert extra.driver_reference("base:1", [], root) == before
    for edited in ("fake_gpus/driver/slices.py", "hostenv/dirs.py"):
        with (root / edited).open("a") as f:
            f.write("\n# an edit of what the image runs\n")
        after = extra.driver_reference("base:1", [], root)
        assert after != before, edited
        before = after
