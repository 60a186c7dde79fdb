"""Bad input never gives a traceback: Hypothesis mutates valid CLI invocations, layout files, catalog
board files and replay bundles, mostly one field at a time so that most cases get past argument parsing.

Each case ends in one of: refused by argparse, refused by our checks (exit 2, one line naming the
problem, nothing started, nothing written), refused for the environment (exit 1, one line), or accepted
(the run reached the point where it would start something: a sentinel stops it there). A traceback or
any other exception fails the test. Counts per target go to reports/fuzz/<target>.json and the terminal.

$DRA_TESTBED_FUZZ_EXAMPLES sets the cases per target (default 25: seconds; `nox -s fuzz` runs 2000).
$DRA_TESTBED_FUZZ_RANDOM=1 draws new cases each run (default: the same cases every run; `nox -s fuzz` sets it).
"""

from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import random
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any, Callable
from unittest import mock

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fake_gpus.catalog import BOARDS_DIR, BOARD_KEYS, CatalogError, load_board_file
from testbed.cli import main as cli
from testbed.clusters.layout import LayoutError, load_layout
from testbed.workloads.bundle import FORMAT as BUNDLE_FORMAT

EXAMPLES = int(os.environ.get("DRA_TESTBED_FUZZ_EXAMPLES", "25"))
REPO = Path(__file__).resolve().parents[2]
FUZZ = settings(max_examples=EXAMPLES, deadline=None, database=None, derandomize=not os.environ.get("DRA_TESTBED_FUZZ_RANDOM"),
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture, HealthCheck.filter_too_much])
REPORTS = REPO / "reports" / "fuzz"

# values a user might type by mistake, and values that stress parsers
ODD_TEXT = ["", " ", "0", "-1", "9", "8", "1", "99999999999999999999", "1.5", "nan", "true", "null", "h100", "h100-80gb",
            "b200-180gb", "whole", "dynamic-mig", "static-mig:", "static-mig:all-1g.10gb", "static-mig:nope", "1.33",
            "1.34", "v1.35", "1.99", "kwok", "kind", "existing", "a" * 300, "Upper", "-x", "--", "../..", "/", "é", "gpu 0",
            "a=b", "=", ":", "::", "gpu-0=", "gpu-0=h100-80gb", "gpu-0=h100-80gb:", "gpu-0=h100-80gb:0", "x=b200-180gb:8:bogus"]
ODD_VALUES: list[Any] = [None, True, False, 0, -1, 1, 7, 8, 9, 2**40, 1.5, "", "x", "8", "whole", "dynamic-mig",
                         "static-mig:all-1g.10gb", "h100-80gb", [], [1], {}, {"a": 1}, "a" * 200, "UPPER", "é"]


class Started(Exception):
    """A sentinel: the run got past every check and was about to start something."""


# --- running the CLI in-process, with sentinels where things would start -----------------------------

SENTINELS = (
    "testbed.clusters.kwok.cluster.ensure",             # kwok up: the toolchain, right before processes start
    "testbed.clusters.kind.cluster.hostdeps.prefetch",  # kind up: apt/Docker, right before anything starts
    "fake_gpus.nvml.build.ensure_library",              # fake-nvml env/build: compiling the library
    "testbed.clusters.kind.images.node_image.ensure_node_image",  # image build
    "testbed.host.docker.dockerd.stop_engine",        # image stop-engine: never stop a real engine from here
    "kubernetes.config.new_client_from_config",         # replay --kubeconfig and friends: talking to a cluster
)


def run_cli(argv: list[str], state: Path) -> tuple[str, int, str]:
    """(outcome, exit code, stderr) of `dra-testbed argv` with every sentinel armed."""
    err = io.StringIO()
    with contextlib.ExitStack() as stack:
        for target in SENTINELS:
            stack.enter_context(mock.patch(target, side_effect=Started(target)))
        stack.enter_context(mock.patch.dict(os.environ, {"DRA_TESTBED_STATE": str(state), "DRA_TESTBED_NO_APT": "1"}))
        stack.enter_context(mock.patch("testbed.host.interrupts.install", return_value=False))  # keep pytest's handlers
        stack.enter_context(contextlib.chdir(state.parent))  # relative paths a mutation makes land in the test's folder
        stack.enter_context(contextlib.redirect_stderr(err))
        stack.enter_context(contextlib.redirect_stdout(io.StringIO()))
        try:
            code = cli.main(argv)
        except Started:
            return "accepted", 0, err.getvalue()
        except SystemExit as exc:  # argparse
            return "argparse", int(exc.code or 0), err.getvalue()
    outcome = {0: "ran", 1: "environment", 2: "refused"}.get(code, f"exit {code}")
    return outcome, code, err.getvalue()


def assert_clean_refusal(outcome: str, code: int, err: str, argv: list[str]) -> None:
    assert "Traceback" not in err, f"{argv}: traceback\n{err}"
    if outcome == "accepted" or outcome == "ran":
        return
    assert code in (1, 2), f"{argv}: exit {code}: {err}"
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{argv}: expected one line, got {len(lines)}:\n{err}"
    assert "error:" in lines[0], f"{argv}: {lines[0]}"
    if outcome == "refused":
        assert names_what_is_valid(lines[0]), f"{argv}: does not say what is valid: {lines[0]}"


def names_what_is_valid(message: str) -> bool:
    return any(word in message for word in ("valid", "expected", "required", "choose from", "must", "pick", "use ", "give ", " only"))


def load_outcome(load: Callable[[Path], Any], path: Path, error: type[Exception], ok: str, bad: str) -> str:
    """`ok` when `load(path)` parses, `bad` when it refuses with `error` in one line naming what is valid."""
    try:
        load(path)
    except error as exc:
        assert "\n" not in str(exc) and names_what_is_valid(str(exc)), str(exc)
        return bad
    return ok


def nothing_written(state: Path) -> list[str]:
    return sorted(str(p.relative_to(state)) for p in state.rglob("*") if p.is_file() and p.name != ".create.lock") if state.exists() else []


def record(target: str, counts: Counter) -> None:
    REPORTS.mkdir(parents=True, exist_ok=True)
    counts["past-argument-parsing"] = counts["total"] - counts["argparse"]
    (REPORTS / f"{target}.json").write_text(json.dumps(dict(sorted(counts.items())), indent=2) + "\n")
    summary = ", ".join(f"{k} {v}" for k, v in sorted(counts.items()))
    print(f"\nfuzz {target}: {summary}")


# --- one-field mutations ---------------------------------------------------------------------------

def mutate_token(token: str, rnd: random.Random) -> str:
    """One change to one argv token: a part of NAME=BOARD:COUNT:MODE, a character, or the whole token."""
    choice = rnd.randrange(5)
    parts = [p for p in __import__("re").split(r"([=:])", token)]
    if choice <= 1 and len(parts) > 1:  # one field of a structured value
        fields = [i for i in range(0, len(parts), 2)]
        i = rnd.choice(fields)
        parts[i] = rnd.choice(ODD_TEXT) if choice == 0 else parts[i][: rnd.randrange(len(parts[i]) + 1)]
        return "".join(parts)
    if choice == 2 and token:
        i = rnd.randrange(len(token))
        return token[:i] + rnd.choice("x-9:=A_ .é") + token[i + 1:]
    if choice == 3:
        return rnd.choice(ODD_TEXT)
    return token + rnd.choice(["", "x", ":whole", "0", ":extra"])


def mutate_argv(argv: list[str], rnd: random.Random) -> list[str]:
    """Mostly: one token of a valid invocation changed; sometimes one dropped, duplicated or added."""
    out = list(argv)
    kind = rnd.randrange(20)
    i = rnd.randrange(1, len(out)) if len(out) > 1 else 0
    values = [j for j in range(1, len(out)) if (out[j - 1].startswith("--") or "/" in out[j]) and not out[j].startswith("--")]
    if kind < 17:
        if values and rnd.random() < 0.85:  # the value of a flag: what gets past argparse into our own checks
            i = rnd.choice(values)
        out[i] = mutate_token(out[i], rnd)
    elif kind == 17:
        del out[i]
    elif kind == 18:
        out.insert(i, out[i])
    else:
        out.insert(i, rnd.choice(["--force", "--port", "--k8s", "--backend", "--layout", "--node", "--allow-large", "--json"]))
    return out


def mutate_data(data: Any, rnd: random.Random) -> Any:
    """One field of a YAML/JSON document: replaced by an odd value, deleted, or an unknown key added."""
    doc = copy.deepcopy(data)
    paths: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for key in node:
                paths.append((node, key))
                walk(node[key])
        elif isinstance(node, list):
            for index in range(len(node)):
                paths.append((node, index))
                walk(node[index])

    walk(doc)
    if not paths:
        return rnd.choice(ODD_VALUES)
    parent, key = rnd.choice(paths)
    kind = rnd.randrange(10)
    if kind < 6:
        parent[key] = rnd.choice(ODD_VALUES)
    elif kind < 8:
        if isinstance(parent, dict):
            del parent[key]
        else:
            parent.pop(key)
    elif kind == 8 and isinstance(parent, dict):
        parent["unexpected_key"] = rnd.choice(ODD_VALUES)
    else:  # a number nudged, a string edited: the mutations that get furthest
        value = parent[key]
        if isinstance(value, bool):
            parent[key] = not value
        elif isinstance(value, int):
            parent[key] = value + rnd.choice([-value - 1, -1, 1, 7, 10**6, 2**40, 2**64])
        elif isinstance(value, str):
            parent[key] = value[:-1] if value and rnd.random() < 0.5 else value + rnd.choice(["x", "0", "-", " "])
        else:
            parent[key] = rnd.choice(ODD_VALUES)
    return doc


def alias_a_node(data: Any, rnd: random.Random) -> None:
    """One list or mapping of the document put in a second place too: yaml.safe_dump writes it as &id001 / *id001."""
    spots: list[tuple[Any, Any]] = []

    def walk(node: Any) -> None:
        for key in (list(node) if isinstance(node, dict) else range(len(node))):
            if isinstance(node[key], (dict, list)):
                spots.append((node, key))
                walk(node[key])

    walk(data)
    (source, skey), (target, tkey) = rnd.choice(spots), rnd.choice(spots)
    target[tkey] = source[skey]


SEEDS = st.integers(0, 2**32 - 1).map(random.Random)


# --- valid starting points ----------------------------------------------------------------------------

VALID_LAYOUT = {"name": "fuzz", "nodes": [
    {"name": "h100", "board": "h100-80gb", "count": 8, "mode": "whole", "replicas": 2},
    {"name": "mig", "board": "h100-80gb", "count": 2, "mode": "dynamic-mig"},
    {"name": "static", "board": "h100-80gb", "count": 1, "mode": "static-mig:all-1g.10gb"},
    {"name": "b200-0", "board": "b200-180gb", "count": 4}]}

VALID_STEPS = [
    {"op": "shared", "claim": "s0", "spec": {"requests": [{"name": "r0", "firstAvailable": False, "alternatives": [
        {"name": "r0", "class": "gpu.nvidia.com", "selectors": [{"string": "productName", "op": "==", "value": "NVIDIA H100 80GB HBM3"}],
         "all": False, "count": 1, "adminAccess": False}]}], "constraints": [], "config": []}},
    {"op": "arrive", "pod": {"name": "p0", "node": None, "containers": [["t0", "s0"]], "claims": [
        {"name": "t0", "shared": None, "template": {"requests": [{"name": "r0", "firstAvailable": True, "alternatives": [
            {"name": "big", "class": "gpu.nvidia.com", "selectors": [{"memory": ">=", "mib": 100000}], "all": False, "count": 2, "adminAccess": False},
            {"name": "any", "class": "gpu.nvidia.com", "selectors": [{"not": {"version": "driverVersion", "op": "<", "value": "570.0.0"}}],
             "all": False, "count": 1, "adminAccess": False}]}],
            "constraints": [{"attribute": "gpu.nvidia.com/productName", "requests": []}], "config": []}},
        {"name": "s0", "shared": "s0", "template": None}]}},
    {"op": "depart", "pod": "p0"},
    {"op": "released", "node": "h100-0"},
]


BUNDLE_HEADER = {"format": BUNDLE_FORMAT}


def write_layout(path: Path, data: Any) -> Path:
    path.write_text(yaml.safe_dump(data, sort_keys=False, allow_unicode=True))
    return path


def cli_bases(folder: Path) -> dict[str, list[list[str]]]:
    """Valid invocations per command, to mutate. Their paths are relative to `folder`, where run_cli runs them:
    with absolute paths a one-character mutation of the prefix (/tmp -> /9mp) made directories at the root of
    the file system, outside any test's folder."""
    write_layout(folder / "layout.yaml", VALID_LAYOUT)
    bundle = folder / "bundle"
    bundle.mkdir(exist_ok=True)
    write_layout(bundle / "layout.yaml", VALID_LAYOUT)
    (bundle / "steps.json").write_text(json.dumps(VALID_STEPS))
    (bundle / "context.json").write_text(json.dumps({"faults": "", "k8s": "1.34"}))
    (bundle / "bundle.json").write_text(json.dumps(BUNDLE_HEADER))
    layout, nvml, report = "layout.yaml", "nvml-state", "report"
    bases = {
        "up": [["up", "--name", "fz", "--node", "gpu-0=h100-80gb:2:whole"],
               ["up", "--name", "fz", "--layout", layout, "--k8s", "1.35"],
               ["up", "--name", "fz", "--node", "a=h100-80gb:1:static-mig:all-1g.10gb", "--node", "b=b200-180gb:8:dynamic-mig"],
               ["up", "--backend", "kind", "--name", "fz", "--node", "w=h100-80gb:1:dynamic-mig", "--port", "31999"]],
        # ./ marks the positional as a path, which mutate_argv mutates as a value (not the subcommand)
        "replay": [["replay", "./bundle"], ["replay", "./bundle", "--k8s", "1.34", "--keep-cluster"]],
        "fake-nvml": [["fake-nvml", "env", "--gpus", "h100-80gb:2", "--gpus", "b200-180gb:1", "--state-dir", nvml],
                      ["fake-nvml", "env", "--gpus", "h100-nvl-94gb:8", "--state-dir", nvml]],
        "image": [["image", "build", "--k8s", "1.34", "--node-only"], ["image", "build", "--offline"], ["image", "stop-engine"]],
        "conformance": [["conformance", "--driver-name", "gpu.nvidia.com", "--layout", layout, "--k8s", "1.34",
                         "--report", report, "--faults", "prepare-fails"],
                        ["conformance", "--driver-name", "gpu.nvidia.com", "--profile", "mig", "--report", report]],
    }
    return bases


def outside_entries(folder: Path) -> set[str]:
    """What is at the root of the file system and beside pytest's folders (a mutated path could reach both)."""
    return {f"/{name}" for name in os.listdir("/")} | {str(p) for p in folder.parent.parent.iterdir()}


CLI_TARGETS = ("up", "replay", "fake-nvml", "image", "conformance")


@pytest.mark.parametrize("target", CLI_TARGETS)
def test_cli_mutations_never_trace_back(tmp_path: Path, target: str) -> None:
    bases = cli_bases(tmp_path)
    counts: Counter = Counter()
    bundle_before = {p.name: p.read_bytes() for p in (tmp_path / "bundle").iterdir()}
    outside_before = outside_entries(tmp_path)

    @FUZZ
    @given(base=st.sampled_from(bases[target]), rnd=SEEDS)
    def case(base: list[str], rnd: random.Random) -> None:
        argv = mutate_argv(base, rnd) if rnd.random() < 0.95 else list(base)
        state = tmp_path / f"state-{counts['total']}"
        nvml = tmp_path / "nvml-state"
        for made in tmp_path.glob("nvml-state*"):  # a mutated --state-dir may name a sibling: each case starts clean
            shutil.rmtree(made) if made.is_dir() else made.unlink()
        outcome, code, err = run_cli(argv, state)
        counts["total"] += 1
        counts[outcome] += 1
        assert_clean_refusal(outcome, code, err, argv)
        if outcome in ("refused", "argparse", "environment"):
            assert nothing_written(state) == [], f"{argv}: wrote {nothing_written(state)}"
            assert not nvml.exists() or outcome == "environment", f"{argv}: made the NVML state dir, then refused"
        shutil.rmtree(state, ignore_errors=True)

    case()
    assert {p.name: p.read_bytes() for p in (tmp_path / "bundle").iterdir()} == bundle_before, "a bundle was changed"
    assert outside_entries(tmp_path) - outside_before == set(), "a case wrote outside the test's folder"
    record(f"cli-{target}", counts)
    if target != "image":  # `image` takes only flags with fixed choices: argparse is all its checking
        assert counts["past-argument-parsing"] * 2 >= counts["total"], f"most cases should get past argparse: {dict(counts)}"


def test_layout_file_mutations_never_trace_back(tmp_path: Path) -> None:
    counts: Counter = Counter()

    @FUZZ
    @given(rnd=SEEDS)
    def case(rnd: random.Random) -> None:
        path = tmp_path / "layout.yaml"
        if rnd.random() < 0.1:  # broken YAML text, not just odd values
            text = yaml.safe_dump(VALID_LAYOUT)
            path.write_text(text[: rnd.randrange(len(text))] + rnd.choice(["", ":", "[", "{", "\t", "- -"]))
        else:
            write_layout(path, mutate_data(VALID_LAYOUT, rnd))
        counts["total"] += 1
        counts[load_outcome(load_layout, path, LayoutError, "parsed", "refused-by-load")] += 1
        state = tmp_path / f"state-{counts['total']}"
        argv = ["up", "--name", "fz", "--layout", str(path)]
        outcome, code, err = run_cli(argv, state)
        counts[outcome] += 1
        assert_clean_refusal(outcome, code, err, argv)
        if outcome != "accepted":
            assert nothing_written(state) == []

    case()
    record("layout-files", counts)
    assert counts["accepted"] > 0 and counts["refused"] > 0, dict(counts)


@pytest.mark.parametrize("board", BOARD_KEYS)
def test_board_file_mutations_never_trace_back(tmp_path: Path, board: str) -> None:
    valid = yaml.safe_load((BOARDS_DIR / f"{board}.yaml").read_text())
    counts: Counter = Counter()

    @FUZZ
    @given(rnd=SEEDS)
    def case(rnd: random.Random) -> None:
        path = tmp_path / f"{board}.yaml"
        doc = mutate_data(valid, rnd)
        if rnd.random() < 0.05 and isinstance(doc, dict):  # an alias: a few of them make a YAML bomb
            alias_a_node(doc, rnd)
        write_layout(path, doc)
        counts["total"] += 1
        counts[load_outcome(load_board_file, path, CatalogError, "accepted", "refused")] += 1

    case()
    record(f"board-{board}", counts)
    assert counts["refused"] > 0, dict(counts)


BOARD_BOMB = """
import resource, sys, yaml
from pathlib import Path
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))  # a regression fails here, not in the machine's OOM killer
from fake_gpus.catalog import BOARDS_DIR, CatalogError, load_board_file
board = yaml.safe_load((BOARDS_DIR / "h100-80gb.yaml").read_text())
board["mig_layouts"]["layouts"]["all-1g.10gb"]["1g.10gb"] = 2**40
path = Path(sys.argv[1]) / "h100-80gb.yaml"
path.write_text(yaml.safe_dump(board))
try:
    load_board_file(path)
except CatalogError as exc:
    print(exc)
"""


def test_a_huge_mig_layout_count_is_refused_before_anything_is_allocated(tmp_path: Path) -> None:
    # found by the board-file fuzz: a layout count of 2**40 was expanded into a list (13.6 GB RSS and rising)
    done = subprocess.run([sys.executable, "-c", BOARD_BOMB, str(tmp_path)], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr[-800:]
    assert done.stdout.strip() == ("h100-80gb.yaml: mig_layouts.all-1g.10gb.1g.10gb: is 1099511627776; "
                                   "valid: 1 to 7 (the profile's max_instances)"), done.stdout


@pytest.mark.parametrize("file", ["steps.json", "layout.yaml", "context.json", "bundle.json"])
def test_bundle_mutations_never_trace_back(tmp_path: Path, file: str) -> None:
    counts: Counter = Counter()
    valid: dict[str, Callable[[], Any]] = {"steps.json": lambda: VALID_STEPS, "layout.yaml": lambda: VALID_LAYOUT,
                                           "context.json": lambda: {"faults": "prepare-fails", "k8s": "1.34"},
                                           "bundle.json": lambda: BUNDLE_HEADER}

    @FUZZ
    @given(rnd=SEEDS)
    def case(rnd: random.Random) -> None:
        bundle = tmp_path / f"bundle-{counts['total']}"
        bundle.mkdir()
        write_layout(bundle / "layout.yaml", VALID_LAYOUT)
        (bundle / "steps.json").write_text(json.dumps(VALID_STEPS))
        (bundle / "context.json").write_text(json.dumps(valid["context.json"]()))
        (bundle / "bundle.json").write_text(json.dumps(BUNDLE_HEADER))
        mutated = mutate_data(valid[file](), rnd)
        if file == "layout.yaml":
            write_layout(bundle / file, mutated)
        elif rnd.random() < 0.1:
            (bundle / file).write_text(json.dumps(mutated)[: rnd.randrange(3, 40)])  # truncated JSON
        else:
            (bundle / file).write_text(json.dumps(mutated))
        before = {p.name: p.read_bytes() for p in bundle.iterdir()}
        state = tmp_path / f"state-{counts['total']}"
        argv = ["replay", str(bundle)]
        outcome, code, err = run_cli(argv, state)
        counts["total"] += 1
        counts[outcome] += 1
        assert_clean_refusal(outcome, code, err, argv)
        if outcome != "accepted":
            assert nothing_written(state) == []
        assert {p.name: p.read_bytes() for p in bundle.iterdir()} == before
        shutil.rmtree(bundle)

    case()
    record(f"bundle-{file.split('.')[0]}", counts)
    # bundle.json holds one field, the format: every mutation of it is refused
    assert counts["refused"] > 0 and (counts["accepted"] > 0 or file == "bundle.json"), dict(counts)


def test_valid_inputs_are_accepted(tmp_path: Path) -> None:
    """The sentinels stop valid runs, so a fuzz whose every case is refused would be noticed here."""
    for target, argvs in cli_bases(tmp_path).items():
        for argv in argvs:
            shutil.rmtree(tmp_path / "nvml-state", ignore_errors=True)
            outcome, code, err = run_cli(argv, tmp_path / "state")
            assert outcome == "accepted", f"{argv}: {outcome} {code} {err}"


@settings(max_examples=EXAMPLES, deadline=None, database=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(st.data())
def test_every_generated_workload_passes_the_bundle_schema(data) -> None:
    """What a failing property writes into steps.json is never refused by the check that replay runs."""
    from testbed.workloads.bundle_schema import check_steps
    from testbed.workloads.model import SharedClaim
    from testbed.workloads.steps import AddShared, Arrive, Depart, Released, from_json
    from testbed.workloads.strategies import arrivals_and_departures, claim_specs

    shared = SharedClaim("shared-0", data.draw(claim_specs(admin=True)))
    steps = [AddShared(shared)]
    for op, item in data.draw(arrivals_and_departures(shared=(shared.name,), admin=True)):
        steps.append(Arrive(item) if op == "arrive" else Depart(item))
    steps.append(Released("h100-0"))
    written = json.loads(json.dumps([step.to_json() for step in steps]))  # as read back from the file
    assert [from_json(step) for step in check_steps(written)] == steps
