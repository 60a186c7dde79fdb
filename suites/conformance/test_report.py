"""The report directory from a run's outcomes: files, exit codes, PRODUCT.yaml shape, and report.html as
headless Chromium renders it (Debian's chromium, installed through testbed/host/hostdeps)."""

from __future__ import annotations

import json
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from testbed.conformance.checks import BY_ID
from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN, PASS, Evidence, Outcome
from testbed.conformance.report import RunInfo, write_report
from testbed.conformance.verdict import EXIT_CODES, exit_code, verdict

INFO = RunInfo(driver="gpu.nvidia.com", backend="kwok", profile="all", kubernetes="v1.34.4", driver_digest="sha256:abc",
               seeds={"hypothesis": "6", "derandomize": True}, command="dra-testbed conformance --driver-name gpu.nvidia.com")


def _outcome(root: Path, check_id: str, verdict_: str, message: str = "") -> Outcome:
    evidence = Evidence(root, check_id)
    if verdict_ == FAIL:
        evidence.write("problems.json", [message])
    return Outcome(check_id, BY_ID[check_id].level, verdict_, message, 0.5, evidence.files, BY_ID[check_id].requirement)


def _sample(root: Path) -> list[Outcome]:
    return [_outcome(root, "slices.served-api", PASS),
            _outcome(root, "partitions.within-counter-set", FAIL, "gpu-0-mig-3g40gb-4-7 consumes memory slices [4, 5, 6]"),
            _outcome(root, "node.prepare-unprepare", NOT_RUN, "backend kwok cannot run it")]


def test_verdicts_and_exit_codes(tmp_path: Path) -> None:
    passed = _outcome(tmp_path, "slices.served-api", PASS)
    unrun = _outcome(tmp_path, "node.prepare-unprepare", NOT_RUN, "no kubelet")
    failed = _outcome(tmp_path, "sched.exact", FAIL, "x")
    should_failed = _outcome(tmp_path, "slices.stable-restart", FAIL, "churn")
    assert exit_code([passed, should_failed]) == EXIT_CODES["pass"] == 0  # a SHOULD does not decide
    assert verdict([passed, unrun]) == "incomplete" and exit_code([passed, unrun]) == 3
    assert exit_code([passed, unrun, failed]) == 1
    assert exit_code([passed, _outcome(tmp_path, "sched.all", ERROR, "broke")]) == 1


def test_report_files(tmp_path: Path) -> None:
    outcomes = _sample(tmp_path)
    write_report(tmp_path, outcomes, INFO, ["12:00:00 RUN slices.served-api"])
    results = json.loads((tmp_path / "results.json").read_text())
    assert results["verdict"] == "fail"
    failed = next(c for c in results["checks"] if c["id"] == "partitions.within-counter-set")
    assert failed["verdict"] == "fail" and all((tmp_path / f).is_file() for f in failed["evidence"])
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    product = yaml.safe_load((tmp_path / "PRODUCT.yaml").read_text())
    assert product["metadata"]["kubernetesVersion"] == "v1.34.4" and product["metadata"]["driverDigest"] == "sha256:abc"
    dra = next(r for r in product["spec"]["accelerators"] if r["id"] == "dra_support")
    assert (dra["level"], dra["status"]) == ("MUST", "Partially Implemented")
    assert all((tmp_path / e).is_file() for r in product["spec"]["draDriver"] for e in r["evidence"])
    assert "RUN slices.served-api" in (tmp_path / "e2e.log").read_text()


@pytest.fixture(scope="module")
def chromium() -> str:
    from testbed.host import hostdeps

    hostdeps.ensure("html")  # installs Debian's chromium when missing (root), else one line saying how
    import shutil

    return shutil.which("chromium") or shutil.which("chromium-browser")


def _render(chromium: str, page: Path, tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([chromium, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path / 'profile'}",
                           "--window-size=1200,1600", *args, page.as_uri()], capture_output=True, text=True, timeout=120)


def test_html_shows_the_verdicts_in_chromium(chromium: str, tmp_path: Path) -> None:
    from matplotlib import image

    write_report(tmp_path, _sample(tmp_path), INFO, [])
    page = tmp_path / "report.html"
    dom = _render(chromium, page, tmp_path, "--dump-dom")
    assert dom.returncode == 0, dom.stderr[-2000:]
    assert 'Verdict: <span class="verdict"' in dom.stdout and ">fail</span>" in dom.stdout
    for check_id, shown in (("slices.served-api", "pass"), ("partitions.within-counter-set", "fail"), ("node.prepare-unprepare", "not-run")):
        assert f'data-check="{check_id}" data-verdict="{shown}"' in dom.stdout
    assert 'id="failure-partitions.within-counter-set"' in dom.stdout and "consumes memory slices [4, 5, 6]" in dom.stdout
    shot = tmp_path / "shot.png"
    painted = _render(chromium, page, tmp_path, f"--screenshot={shot}")
    assert painted.returncode == 0 and shot.is_file(), painted.stderr[-2000:]
    pixels = (image.imread(str(shot))[:, :, :3] * 255).round().astype(int).reshape(-1, 3).tolist()
    colours = {tuple(p) for p in pixels}
    assert (0x2E, 0x7D, 0x32) in colours and (0xC6, 0x28, 0x28) in colours, "the pass and fail badges are not painted"


def test_the_page_plots_the_node_side_of_a_generated_run(tmp_path: Path) -> None:
    import base64
    import re

    evidence = Evidence(tmp_path, "node.generated")
    evidence.write("node-side.json", {"pods": [{"pod": "ns/p1", "node": "w2", "containers": {}, "start_s": 3.2},
                                               {"pod": "ns/p2", "node": "w2", "containers": {}, "start_s": 5.0}],
                                      "occupancy": [{"check": 1, "node": "w2", "seen": 1, "allocated": 1},
                                                    {"check": 2, "node": "w2", "seen": 0, "allocated": 0}]})
    ran = Outcome("node.generated", "MUST", PASS, "", 9.0, evidence.files, BY_ID["node.generated"].requirement)
    write_report(tmp_path, [ran], INFO, [])
    page = (tmp_path / "report.html").read_text()
    found = re.search(r'alt="partition occupancy and pod start" src="data:image/png;base64,([^"]+)"', page)
    assert found and base64.b64decode(found.group(1)).startswith(b"\x89PNG")
    write_report(tmp_path / "none", _sample(tmp_path / "none"), INFO, [])  # no generated run on the nodes: no such plot
    assert "partition occupancy" not in (tmp_path / "none" / "report.html").read_text()
