"""Kubernetes' AI-conformance tests (kubernetes-sigs/ai-conformance, built from source) on kind beds.

Smoke (`nox -s tests`): TestSecureAcceleratorAccess on the session's kind bed (suites/kind_bed.py, our driver),
with the stand-in of `ubuntu:22.04` loaded into its workers, passes 3 of 3 subtests.
Full (`nox -s ai-conformance`, $DRA_TESTBED_AI_CONFORMANCE=full): `dra-testbed ai-conformance` end to end on a
kind bed of its own per row: our driver, our driver under fault switches, NVIDIA's driver; each row's expected
verdicts are what the tests can see (see docs/user/ai-conformance.md for why `cdi-all-devices` passes them).
"""

from __future__ import annotations

import json
import os
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from testbed.aiconformance.run import plan, run_tests
from testbed.aiconformance.source import SourceUnreachable, SuiteBuildError, ensure_tests, list_tests
from testbed.aiconformance.standins import images_named, provide, uncovered

pytestmark = [pytest.mark.kind, pytest.mark.slow]
FULL = os.environ.get("DRA_TESTBED_AI_CONFORMANCE") == "full"
SECURE = "TestSecureAcceleratorAccess"
SUBTESTS = ("PositiveAccessTest", "NegativeIsolationTest", "MultiContainerIsolationTest")


@pytest.fixture(scope="module")
def ai_tests(request):
    try:
        return ensure_tests(request.config.getoption("--k8s"))
    except SourceUnreachable as exc:  # a machine that reaches neither GitHub nor a clone: nothing to build from
        pytest.skip(f"AI-conformance tests: {exc}")  # allowed in suites/skips.yaml, only where the source is unreachable
    except SuiteBuildError as exc:
        pytest.fail(f"AI-conformance tests: {exc}", pytrace=False)


def test_secure_accelerator_access_passes_on_the_kind_bed_with_our_driver(kind_bed, ai_tests, tmp_path) -> None:
    from testbed.clusters.kind.image_alias import load_as

    images = images_named(ai_tests.source)
    assert images and not uncovered(images), f"the tests name images without a stand-in: {uncovered(images)}"
    provide(images, lambda source, alias: load_as(kind_bed.cluster, source, alias, workers_only=True), lambda: kind_bed.workload_image)
    results = run_tests(ai_tests, kind_bed.cluster.kubeconfig(), plan(list_tests(ai_tests.binary), f"^{SECURE}$"), tmp_path)
    verdicts = {r.name: r.verdict for r in results}
    assert verdicts == {SECURE: "pass", **{f"{SECURE}/{s}": "pass" for s in SUBTESTS}}, (tmp_path / "e2e.log").read_text()[-3000:]
    suite = ET.parse(tmp_path / "junit.xml").getroot()
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors")) == ("4", "0", "0")


# driver, fault switches, expected verdict of each subtest (the top-level test fails when one does)
ROWS = {
    "ours": ("ours", "", dict.fromkeys(SUBTESTS, "pass")),
    # the claimed container sees every GPU of the node; the tests only look for *some* /dev/nvidia* there, and an
    # unclaimed container gets nothing from a driver's CDI spec, so they cannot see this fault (our suite's
    # node.container-sees-its-devices does)
    "ours-cdi-all-devices": ("ours", "cdi-all-devices", dict.fromkeys(SUBTESTS, "pass")),
    # no claim is ever prepared: the pods holding one never run
    "ours-prepare-fails": ("ours", "prepare-fails", {"PositiveAccessTest": "fail", "NegativeIsolationTest": "pass",
                                                     "MultiContainerIsolationTest": "fail"}),
    "nvidia": ("nvidia", "", dict.fromkeys(SUBTESTS, "pass")),
}


@pytest.mark.skipif(not FULL, reason="a kind bed per row: nox -s ai-conformance ($DRA_TESTBED_AI_CONFORMANCE=full)")
@pytest.mark.parametrize("row", list(ROWS))
def test_the_command_on_a_bed_of_its_own(row, ai_tests, request, tmp_path) -> None:
    from hostenv.processes import run_child

    driver, faults, expected = ROWS[row]
    report = tmp_path / "report"
    argv = [sys.executable, "-m", "testbed.cli", "ai-conformance", "--k8s", request.config.getoption("--k8s"), "--driver", driver,
            "--name", f"aic-{row}"[:30], "--report", str(report), *(["--faults", faults] if faults else [])]
    done = run_child(argv, capture_output=True, text=True, timeout=1200)
    summary = json.loads((report / "summary.json").read_text())
    got = {r["name"].partition("/")[2]: r["verdict"] for r in summary["results"] if "/" in r["name"]}
    assert got == expected, done.stderr[-3000:]
    assert done.returncode == (0 if set(expected.values()) == {"pass"} else 1), done.stderr[-2000:]
    checklist = yaml.safe_load((report / f"KubernetesAIConformance-{request.config.getoption('--k8s')}.yaml").read_text())
    secure = next(i for i in checklist["spec"]["security"] if i["id"] == "secure_accelerator_access")
    assert secure["status"] == ("Implemented" if done.returncode == 0 else "Not Implemented")
    assert secure["evidence"][0] == f"file://results/junit.xml#{SECURE}" and (report / "results" / "junit.xml").is_file()
    assert [s["image"] for s in summary["standIns"]] == ["ubuntu:22.04"]
