"""The driver image is made of the driver packages only: editing the test bed neither enters it nor
changes its tag (testbed/images/extra.py: driver_sources, driver_reference)."""

from __future__ import annotations

import shutil
from pathlib import Path

from testbed.clusters.kind.images import driver_image as extra

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


def _closure(names: list[str]) -> set[str]:
    """The distributions `names` need, transitively, as installed here (normalised names)."""
    from importlib import metadata

    seen: set[str] = set()
    todo = list(names)
    while todo:
        name = extra.requirement_name(todo.pop())
        if name in seen:
            continue
        seen.add(name)
        try:
            requires = metadata.requires(name) or []
        except metadata.PackageNotFoundError:
            continue
        todo += [r for r in requires if "extra ==" not in r]
    return seen


def test_the_image_installs_what_the_driver_imports_and_not_the_harness():
    import json
    import subprocess
    import sys

    # every module of the image's packages imported in a fresh interpreter: the third-party ones it loads
    script = """
import importlib, json, pkgutil, sys
base = set(sys.modules)
for package in ("fake_gpus", "hostenv"):
    root = importlib.import_module(package)
    for info in pkgutil.walk_packages(root.__path__, package + "."):
        importlib.import_module(info.name)
from importlib import metadata
owners = metadata.packages_distributions()
tops = {n.split(".")[0] for n in set(sys.modules) - base}
print(json.dumps(sorted({d for t in tops if t not in sys.stdlib_module_names for d in owners.get(t, [])})))
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    imported = {extra.requirement_name(d) for d in json.loads(done.stdout)} - {"dra-testbed"}  # ours: copied in
    installed = _closure([*extra.driver_dependencies(), *extra.DRIVER_EXTRAS])
    assert imported and imported <= installed, f"the driver imports {sorted(imported - installed)}, which its image lacks"
    assert not {"matplotlib", "numpy", "hypothesis", "jinja2", "rich"} & installed, "the harness's dependencies entered the image"
