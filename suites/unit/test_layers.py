"""Fitness of the architecture: imports only go downwards, and the driver never reads the catalog.

The static half reads the source with `ast` (import_graph.py); the run-time half is the audit that
driver processes run with $FAKE_GPUS_MODULE_REPORT (fake_gpus/driver/audit.py; the live publisher and
plugin are checked in suites/driver and suites/plugin). Each check is shown to fail on planted
violations, made in a temporary copy of the tree or in a module made up at run time.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import import_graph
from fake_gpus.driver.audit import REPORT_ENV

REPO = Path(__file__).resolve().parents[2]


def test_no_upward_import_and_no_cycle():
    edges = import_graph.all_edges(REPO)
    assert len(edges) > 100  # the graph really was read
    assert [f"{e.file}:{e.line} {e.source} -> {e.target}" for e in import_graph.upward(edges)] == []
    assert import_graph.cycles(import_graph.component_graph(edges)) == []


def test_driver_never_names_the_catalog_or_the_testbed():
    edges = import_graph.all_edges(REPO)
    assert [f"{e.file}:{e.line} -> {e.target}" for e in import_graph.catalog_reads(edges)] == []
    assert not [e for e in edges if e.source.startswith("fake_gpus") and e.target.startswith("testbed")
                and e.source not in import_graph.NAMES_ONLY]


def test_every_module_sits_in_a_layer():
    edges = import_graph.all_edges(REPO)
    modules = {e.source for e in edges}
    assert {m for m in modules if import_graph.component(m) is None} <= {"fake_gpus", "testbed"}


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """A copy of our packages' sources to plant violations in."""
    for package in import_graph.PACKAGES:
        shutil.copytree(REPO / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__", "*.so*", "*.yaml"))
    return tmp_path


def _plant(tree: Path, module: str, code: str) -> None:
    file = tree / (module.replace(".", "/") + ".py")
    if not file.exists():
        file = tree / module.replace(".", "/") / "__init__.py"
    file.write_text(file.read_text() + "\n\n" + textwrap.dedent(code))


@pytest.mark.parametrize("module, code, check", [
    ("fake_gpus.driver.slices", "from testbed.clusters import layout\n", "upward"),
    ("fake_gpus.nvml.build", "def late():\n    import testbed.cli.main\n", "upward"),
    ("hostenv.dirs", "from fake_gpus.catalog import get_board\n", "upward"),
    ("fake_gpus.catalog", "import importlib\nimportlib.import_module('fake_gpus.driver.slices')\n", "upward"),
    ("fake_gpus.driver.slices", "from fake_gpus.catalog import get_board\n", "catalog"),
    ("fake_gpus.driver.publisher", "import importlib\nB = importlib.import_module('fake_gpus.catalog')\n", "catalog"),
    ("fake_gpus.driver.kubeletplugin.driver",
     "import subprocess, sys\ndef boards():\n    return subprocess.run([sys.executable, '-m', 'fake_gpus.catalog'])\n", "catalog"),
])
def test_static_check_catches_planted_violation(tree: Path, module: str, code: str, check: str):
    assert import_graph.upward(import_graph.all_edges(tree)) == []  # the copy is clean before planting
    _plant(tree, module, code)
    edges = import_graph.all_edges(tree)
    found = import_graph.upward(edges) if check == "upward" else import_graph.catalog_reads(edges)
    assert [e.source for e in found] == [module]


def test_cycle_is_found(tree: Path):
    _plant(tree, "fake_gpus.driver.nvml_adapter", "import fake_gpus.nvml.state\n")  # downwards: fine alone
    _plant(tree, "fake_gpus.nvml.state", "import fake_gpus.driver.nvml_adapter\n")
    graph = import_graph.component_graph(import_graph.all_edges(tree))
    assert ["fake_gpus.driver", "fake_gpus.nvml", "fake_gpus.driver"] in import_graph.cycles(graph)


def test_every_testbed_subpackage_is_a_layer_of_its_own():
    # a new subpackage must take its place in the order: inside another's layer its imports would go unjudged
    packages = sorted(f"testbed.{d.name}" for d in (REPO / "testbed").iterdir() if (d / "__init__.py").is_file())
    assert len(packages) > 10
    assert [p for p in packages if p not in import_graph.LAYERS] == []


@pytest.mark.parametrize("module, code", [
    ("testbed.kube.waiting", "def late():\n    from testbed.workloads import runner\n"),  # an import inside a function
    ("testbed.clusters.layout", "import testbed.drivers.ours\n"),  # the backends' interface reaching a driver
    ("testbed.workloads.evolution", "from testbed.conformance import checks\n"),  # sideways up, as evolution once did
])
def test_testbed_layers_catch_a_planted_upward_import(tree: Path, module: str, code: str):
    _plant(tree, module, code)
    assert [e.source for e in import_graph.upward(import_graph.all_edges(tree))] == [module]


def test_benchmarks_import_no_test_module():
    assert import_graph.test_imports(REPO) == []


def test_a_benchmark_importing_a_test_module_is_caught(tmp_path: Path):
    (tmp_path / "benchmarks").mkdir()
    (tmp_path / "benchmarks" / "bench.py").write_text("def main():\n    import suites.properties.conftest as props\n")
    assert [f"{e.file}:{e.line}" for e in import_graph.test_imports(tmp_path)] == ["benchmarks/bench.py:2"]


def test_graph_script_reports_clean_tree():
    out = subprocess.run([sys.executable, str(Path(import_graph.__file__)), str(REPO)], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout
    assert "0 violations, 0 cycles" in out.stdout


# ----------------------------------------------------------------------------- run time

PLANTED = """
import sys, types
import fake_gpus.driver.slices  # a driver process: the audit is on from the package's import
module = types.ModuleType({name!r})
sys.modules[module.__name__] = module
exec(compile({code!r}, "planted.py", "exec"), module.__dict__)
"""


def _run_planted(tmp_path: Path, name: str, code: str) -> list[dict]:
    reports = tmp_path / "reports"
    env = {**os.environ, REPORT_ENV: str(reports), "PYTHONPATH": str(REPO)}
    out = subprocess.run([sys.executable, "-c", PLANTED.format(name=name, code=code)], env=env, capture_output=True,
                         text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    found = [json.loads(f.read_text()) for f in sorted(reports.glob("*.json"))]
    assert len(found) == 1  # the planted process; a child that never loads the driver writes none
    assert "fake_gpus.driver.slices" in found[0]["modules"]
    return found[0]["violations"]


BOARD_FILE = REPO / "fake_gpus" / "catalog" / "boards" / "h100-80gb.yaml"
READS = {
    "static import": "from fake_gpus.catalog import get_board\n",
    "importlib": "import importlib\nimportlib.import_module('fake_gpus.catalog')\n",
    "subprocess": "import subprocess, sys\nsubprocess.run([sys.executable, '-c', 'import fake_gpus.catalog'], check=True)\n",
    "open": f"open({str(BOARD_FILE)!r}).read()\n",
    "testbed import": "import testbed.errors\n",
}


@pytest.mark.parametrize("how", sorted(READS))
def test_runtime_audit_catches_driver_reading_the_catalog(tmp_path: Path, how: str):
    violations = _run_planted(tmp_path, "fake_gpus.driver.planted", READS[how])
    assert violations and {v["by"] for v in violations} == {"fake_gpus.driver.planted"}, violations


@pytest.mark.parametrize("how", ["static import", "importlib", "open"])
def test_runtime_audit_lets_the_hardware_side_read_the_catalog(tmp_path: Path, how: str):
    assert _run_planted(tmp_path, "fake_gpus.machine.planted", READS[how]) == []
