"""`dra-testbed density` on a slice of the Alibaba trace, each mode on a real KWOK bed with kube-scheduler."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from hostenv.processes import run_child
from testbed.density.mapping import compute_size

DATA = Path(__file__).with_name("data")
H100_BY_SIZE = {1: "1g.10gb", 2: "2g.20gb", 3: "3g.40gb", 4: "4g.40gb", 7: "7g.80gb"}
H100_ORDER = ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb", "gpu"]
BALANCED = {"1g.10gb", "2g.20gb", "3g.40gb"}
MODES = "whole,static-mig:all-balanced,dynamic-mig"


def density(*args: str) -> subprocess.CompletedProcess:
    return run_child([sys.executable, "-m", "testbed.cli", "density", *args], capture_output=True, text=True, timeout=900)


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict]:
    work = tmp_path_factory.mktemp("density")
    fleet = work / "fleet.yaml"
    fleet.write_text("name: two-h100\nnodes:\n  - {name: h100, board: h100-80gb, count: 8, replicas: 2}\n")
    out = density("--trace", str(DATA / "default-head60.csv"), "--fleet", str(fleet), "--modes", MODES,
                  "--report", str(work / "report"), "--name", f"dens-{uuid.uuid4().hex[:6]}")
    assert out.returncode == 0, out.stderr[-3000:]
    return work / "report", json.loads((work / "report" / "density.json").read_text())


@pytest.mark.cluster
@pytest.mark.slow
def test_every_mode_replays_every_pod_and_event(report) -> None:
    _, doc = report
    assert list(doc["modes"]) == MODES.split(",")
    assert doc["gpu_pods"] == 55 and doc["cpu_only_pods_left_out"] == 5 and doc["fleet_gpus"] == 16
    for mode, data in doc["modes"].items():
        assert len(data["pods"]) == 55 and len(data["samples"]) == 110, mode  # 55 arrivals, 55 departures
        assert data["summary"]["placed"] + data["summary"]["never_placed"] == 55
        assert data["samples"][-1]["placed"] == data["samples"][-1]["pending"] == 0  # every pod departed
        assert max(s["gpus_in_use"] for s in data["samples"]) <= 16


@pytest.mark.cluster
@pytest.mark.slow
def test_allocations_follow_the_mapping_in_each_mode(report) -> None:
    _, doc = report
    whole, static, dynamic = (doc["modes"][m]["pods"] for m in MODES.split(","))
    for pod in whole:
        assert pod["devices"] in ([], ["gpu"] * pod["num_gpu"]), pod
    for pod in static:
        assert set(pod["devices"]) <= BALANCED, pod  # all-balanced has no whole GPU and no 7g
        if pod["gpu_milli"] == 1000:
            assert pod["devices"] == [] and pod["seconds_to_schedule"] is None
    for pod in dynamic:
        if not pod["devices"]:
            continue
        first = "gpu" if pod["gpu_milli"] == 1000 else H100_BY_SIZE[compute_size(pod["gpu_milli"])]
        assert all(H100_ORDER.index(d) >= H100_ORDER.index(first) for d in pod["devices"]), pod
    assert sum(bool(p["devices"]) for p in dynamic) >= sum(bool(p["devices"]) for p in whole)
    shared = [p for p in dynamic if p["devices"] and p["gpu_milli"] < 1000]
    assert shared and all(d != "gpu" for p in shared for d in p["devices"])  # shares got partitions


@pytest.mark.cluster
@pytest.mark.slow
def test_report_page_ties_table_and_plots_together(report) -> None:
    directory, doc = report
    page = (directory / "index.html").read_text()
    for png in ("placed.png", "pending.png", "gpus.png", "stranded-compute.png", "stranded-memory.png", "time-to-schedule.png"):
        assert f'src="{png}"' in page
        assert (directory / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    for mode, data in doc["modes"].items():
        assert f"<td>{mode}</td><td>{data['summary']['placed']}</td>" in page


@pytest.mark.parametrize(("args", "message"), [
    (["--modes", "whole,sliced"], "unknown mode 'sliced'"),
    (["--modes", "static-mig:all-9g"], "MIG layout 'all-9g' of h100-80gb is unknown"),
    (["--trace", "/etc/hostname"], "missing column 'name'"),
    (["--window", "0"], "--window 0"),
    (["--modes", "whole:shares=memory", "--k8s", "1.34"], "needs --k8s 1.35 or newer"),  # 1.34.4 misjudges shares
    (["--modes", "dynamic-mig:shares=memory"], "valid sharing modes: whole:shares=memory, whole:shares=<N>"),
])
def test_bad_input_is_one_line_and_exit_2(args: list[str], message: str) -> None:
    base = {"--trace": str(DATA / "default-head60.csv"), "--fleet": str(Path(__file__).parents[2] / "clusters/layouts/density-h100.yaml")}
    for flag, value in zip(args[::2], args[1::2]):
        base[flag] = value
    out = density(*[x for kv in base.items() for x in kv])
    assert out.returncode == 2 and out.stderr.count("\n") == 1 and message in out.stderr, out.stderr
