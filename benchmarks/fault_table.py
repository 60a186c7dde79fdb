"""Which tests fail under which fault switch: a pass/fail table of a fast driver and plugin selection,
run once per switch of `fake_gpus/driver/faults.py` (and once with none), for comparing two trees.

    python benchmarks/fault_table.py run [--tree DIR] [--out table.json] [--switches a,b]
    python benchmarks/fault_table.py compare BEFORE.json AFTER.json

One pytest session runs every selected test once per switch (an autouse fixture parametrised by the
switch). A switch reaches the driver as the driver would see it with $DRA_TESTBED_FAULTS set: every
driver process (the kubelet plugin, started per test) gets it added to `active_faults()` through a
`sitecustomize` on PYTHONPATH, and the in-process publisher code gets it added to `build_slices`'s
faults. The selection is the tests that start their driver per test (a cluster-wide publisher shared
by a session could not change switch per test) and finish in seconds; `compare` prints the switches
and tests whose outcome differs and exits 1 if any does. Nothing is left behind: pytest's own
fixtures stop what they start, and the helper files live in a temporary directory.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
SWITCH_ENV = "FAULT_TABLE_SWITCH"
OUT_ENV = "FAULT_TABLE_OUT"
SWITCHES_ENV = "FAULT_TABLE_SWITCHES"
NONE = "none"
SELECTION = [
    "suites/driver/test_slices.py::test_dynamic_mig_slices",
    "suites/driver/test_slices.py::test_whole_and_static_slices",
    "suites/driver/test_slices.py::test_static_layout_survives_a_restart_unchanged",
    "suites/driver/test_slices.py::test_faults_change_the_slices",
    "suites/plugin/test_kubelet_plugin.py::test_registration_names_the_driver_and_both_api_versions",
    "suites/plugin/test_kubelet_plugin.py::test_dynamic_mig_prepare_creates_the_instance_at_its_placement_and_unprepare_removes_it",
    "suites/plugin/test_kubelet_plugin.py::test_whole_gpu_prepare_exposes_only_that_gpu",
    "suites/plugin/test_kubelet_plugin.py::test_prepare_twice_is_idempotent",
]
KEYWORD = "not 1.35 and not 1.36 and not h100-nvl and not h200 and not gb200"  # one minor, one Hopper and one Blackwell board

# Loaded by every Python process of the run (PYTHONPATH): the driver's one fault seam, widened.
SITECUSTOMIZE = f'''
import os
if os.environ.get("{SWITCH_ENV}"):
    try:
        import fake_gpus.driver.faults as _faults
    except ImportError:
        _faults = None
    if _faults is not None:
        _active = _faults.active_faults
        def active_faults(environ=None):
            return _active(environ) | {{os.environ["{SWITCH_ENV}"]}}
        _faults.active_faults = active_faults
'''

# A pytest plugin (-p): the switch parameter, the in-process seam, and the results file.
PLUGIN = f'''
import inspect, json, os
import pytest
import fake_gpus.driver.slices as _slices

SWITCHES = os.environ["{SWITCHES_ENV}"].split(",")
_build = _slices.build_slices
_signature = inspect.signature(_build)

def build_slices(*args, **kwargs):
    bound = _signature.bind(*args, **kwargs)
    bound.apply_defaults()
    switch = os.environ.get("{SWITCH_ENV}")
    if switch:
        bound.arguments["faults"] = frozenset(bound.arguments["faults"]) | {{switch}}
    return _build(*bound.args, **bound.kwargs)

_slices.build_slices = build_slices  # before any test or driver module binds the name

@pytest.fixture(autouse=True, params=SWITCHES, ids=[f"FT={{s}}" for s in SWITCHES])
def fault_table_switch(request):
    if request.param == "{NONE}":
        os.environ.pop("{SWITCH_ENV}", None)
    else:
        os.environ["{SWITCH_ENV}"] = request.param
    yield request.param
    os.environ.pop("{SWITCH_ENV}", None)

_results = {{}}

def _base(nodeid, token):
    head, _, inner = nodeid[:-1].partition("[")
    if inner == token:
        return head
    for old in (token + "-", "-" + token):
        if old in inner:
            return f"{{head}}[{{inner.replace(old, '', 1)}}]"
    return nodeid

def pytest_runtest_logreport(report):
    found = [s for s in SWITCHES if f"FT={{s}}" in report.nodeid]
    if not found:
        return
    switch = max(found, key=len)
    base = _base(report.nodeid, f"FT={{switch}}")
    cell = _results.setdefault(switch, {{}})
    if report.failed:
        cell[base] = "fail"
    elif report.skipped:
        cell.setdefault(base, "skip")
    elif report.when == "call":
        cell.setdefault(base, "pass")

def pytest_sessionfinish(session):
    with open(os.environ["{OUT_ENV}"], "w") as out:
        json.dump(_results, out, indent=1, sort_keys=True)
'''


def _switches(tree: Path, python: str, wanted: str | None) -> list[str]:
    names = subprocess.run([python, "-c", "import json; from fake_gpus.driver.faults import FAULTS; print(json.dumps(list(FAULTS)))"],
                           cwd=tree, env={**os.environ, "PYTHONPATH": str(tree)}, capture_output=True, text=True, check=True)
    known = json.loads(names.stdout)
    if wanted is None:
        return [NONE, *known]
    chosen = [s.strip() for s in wanted.split(",") if s.strip()]
    unknown = [s for s in chosen if s != NONE and s not in known]
    if unknown:
        raise SystemExit(f"fault_table: unknown switch {unknown[0]!r}; valid: {NONE}, {', '.join(known)}")
    return chosen


def run(tree: Path, out: Path, python: str, wanted: str | None) -> int:
    """Run the selection under every switch in `tree`; write {switch: {test: outcome}} to `out`."""
    tree = tree.resolve()
    if not (tree / "fake_gpus" / "driver" / "faults.py").is_file():
        raise SystemExit(f"fault_table: {tree} is not a dra-testbed tree (no fake_gpus/driver/faults.py); valid: a checkout of this repository")
    switches = _switches(tree, python, wanted)
    with tempfile.TemporaryDirectory(prefix="fault-table-") as helpers:
        Path(helpers, "sitecustomize.py").write_text(SITECUSTOMIZE)
        Path(helpers, "fault_table_plugin.py").write_text(PLUGIN)
        env = {**os.environ, "PYTHONPATH": os.pathsep.join((str(tree), helpers)), SWITCHES_ENV: ",".join(switches),
               OUT_ENV: str(out.resolve())}
        env.pop("DRA_TESTBED_FAULTS", None)
        env.pop(SWITCH_ENV, None)
        started = time.monotonic()
        proc = subprocess.run([python, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "fault_table_plugin",
                               "-k", KEYWORD, *SELECTION], cwd=tree, env=env)
        seconds = time.monotonic() - started
    table = json.loads(out.read_text())
    tests = sorted({t for cells in table.values() for t in cells})
    print(f"{len(switches)} switches x {len(tests)} tests in {seconds:.0f} s (pytest exit {proc.returncode}); table in {out}")
    for switch in switches:
        failed = sorted(t for t, o in table.get(switch, {}).items() if o != "pass")
        print(f"  {switch:22} {len(failed):3} not passed" + (": " + ", ".join(t.split("::", 1)[1] for t in failed) if failed else ""))
    return 0


def compare(before: Path, after: Path) -> int:
    """Print every (switch, test) whose outcome differs; 0 when the tables are identical."""
    a, b = json.loads(before.read_text()), json.loads(after.read_text())
    differences = []
    for switch in sorted(set(a) | set(b)):
        if switch not in a or switch not in b:
            differences.append(f"switch {switch}: only in {'after' if switch in b else 'before'}")
            continue
        for test in sorted(set(a[switch]) | set(b[switch])):
            x, y = a[switch].get(test, "absent"), b[switch].get(test, "absent")
            if x != y:
                differences.append(f"{switch:22} {test}: {x} -> {y}")
    cells = sum(len(v) for v in a.values())
    print(f"{len(a)} switches, {cells} cells before; {len(differences)} differences")
    for line in differences:
        print("  " + line)
    return 1 if differences else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    r = sub.add_parser("run")
    r.add_argument("--tree", type=Path, default=REPO)
    r.add_argument("--out", type=Path, default=Path("fault-table.json"))
    r.add_argument("--python", default=sys.executable)
    r.add_argument("--switches", help=f"comma-separated subset (default: {NONE} and every switch of the tree)")
    c = sub.add_parser("compare")
    c.add_argument("before", type=Path)
    c.add_argument("after", type=Path)
    args = parser.parse_args(argv)
    if args.command == "run":
        return run(args.tree, args.out, args.python, args.switches)
    return compare(args.before, args.after)


if __name__ == "__main__":
    sys.exit(main())
