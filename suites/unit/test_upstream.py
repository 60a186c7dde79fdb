"""The upstream DRA e2e runner's bookkeeping: groups, totals against the dry run, strict expected failures,
the DRA package scan and bad input. (The live run is in suites/upstream.)"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from testbed.errors import BadInputError
from testbed.upstream import exceptions
from testbed.toolchain import gobuild
from testbed.upstream.binary import dra_packages, framework_imports
from testbed.upstream.groups import group_of
from testbed.upstream.report import Spec, read_specs, summarise

CP = "[sig-node] [DRA] control plane must deallocate after use"
KUBELET = "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] on single node supports claim and class parameters"
PRIO = "[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] [FeatureGate:DRAPrioritizedList] [Beta] chooses the first subrequest"


def test_groups_come_from_the_spec_text() -> None:
    assert group_of(CP) == "control plane"
    assert group_of("[sig-api-machinery] ResourceQuota [DRA] should create a ResourceQuota and capture the life of a ResourceClaim") == "control plane"
    assert group_of(KUBELET) == "kubelet"
    assert group_of(PRIO) == "prioritized list"
    assert group_of("[sig-node] [DRA] kubelet [Feature:DynamicResourceAllocation] with v1beta2 API supports x") == "v1beta1/v1beta2"
    assert group_of("[sig-node] [DRA] kubelet [FeatureGate:DRADeviceTaints] [Beta] evicts") == "device taints"


def _dry(*names: str) -> list[Spec]:
    return [Spec(n, "passed") for n in names] + [Spec("[sig-node] [DRA] something filtered out", "skipped")]


def test_all_passed_adds_up() -> None:
    summary = summarise("1.34", "kwok", _dry(CP, KUBELET), [Spec(CP, "passed"), Spec(KUBELET, "passed")], [])
    assert summary.ok and summary.totals_match and summary.dry_run == 2
    assert summary.counts["control plane"]["passed"] == 1 and summary.counts["kubelet"]["passed"] == 1


def test_a_failure_a_runtime_skip_and_a_missing_spec_each_fail_the_run() -> None:
    failed = summarise("1.34", "kwok", _dry(CP), [Spec(CP, "failed", message="boom")], [])
    assert not failed.ok and failed.totals_match and "boom" in failed.failures[0][1]
    skipped = summarise("1.34", "kwok", _dry(CP), [Spec(CP, "skipped")], [])
    assert not skipped.ok and not skipped.totals_match  # a silent skip does not add up
    missing = summarise("1.34", "kwok", _dry(CP, KUBELET), [Spec(CP, "passed")], [])
    assert not missing.ok and missing.missing == [KUBELET]


def _exceptions(tmp_path: Path, text: str) -> list[exceptions.Exception_]:
    path = tmp_path / "exceptions.yaml"
    path.write_text(text)
    return exceptions.load(path)


def test_exceptions_are_strict_expected_failures(tmp_path: Path) -> None:
    entries = _exceptions(tmp_path, "exceptions:\n- test: 'kubelet .* claim and class'\n  backends: [kind]\n  reason: needs a GPU\n")
    expected = summarise("1.34", "kind", _dry(KUBELET), [Spec(KUBELET, "failed")], entries)
    assert expected.ok and expected.counts["kubelet"]["excepted"] == 1 and expected.excepted == [(KUBELET, "needs a GPU")]
    passing = summarise("1.34", "kind", _dry(KUBELET), [Spec(KUBELET, "passed")], entries)
    assert not passing.ok and "remove the exception" in passing.failures[0][1]
    other_backend = summarise("1.34", "kwok", _dry(KUBELET), [Spec(KUBELET, "failed")], entries)
    assert not other_backend.ok  # the entry is for kind only


@pytest.mark.parametrize("text", ["exceptions: {}\n", "exceptions:\n- test: x\n", "exceptions:\n- test: '('\n  reason: r\n",
                                  "exceptions:\n- test: x\n  reason: r\n  colour: red\n"])
def test_malformed_exceptions_are_refused(tmp_path: Path, text: str) -> None:
    with pytest.raises(BadInputError, match="exception|exceptions"):
        _exceptions(tmp_path, text)


def test_committed_exceptions_load() -> None:
    assert isinstance(exceptions.load(), list)


def test_ginkgo_json_report_is_read(tmp_path: Path) -> None:
    report = [{"SpecReports": [
        {"LeafNodeType": "SynchronizedBeforeSuite", "State": "passed"},
        {"LeafNodeType": "It", "ContainerHierarchyTexts": ["[sig-node] [DRA]", "control plane"], "LeafNodeText": "must deallocate after use",
         "State": "failed", "RunTime": 2_500_000_000, "Failure": {"Message": "timed out"}},
    ]}]
    (tmp_path / "r.json").write_text(json.dumps(report))
    assert read_specs(tmp_path / "r.json") == [Spec(CP, "failed", 2.5, "timed out")]


def test_dra_packages_are_found_in_the_module(tmp_path: Path) -> None:
    e2e = tmp_path / "test" / "e2e"
    for rel, text in {"dra/dra.go": 'framework.WithLabel("DRA")', "dra/utils/deploy.go": "features.DynamicResourceAllocation",
                      "apimachinery/quota.go": 'f.WithLabel("DRA")', "apps/x.go": "nothing", "framework/f.go": 'WithLabel("DRA")',
                      "node/n_test.go": 'WithLabel("DRA")'}.items():
        (e2e / rel).parent.mkdir(parents=True, exist_ok=True)
        (e2e / rel).write_text(text)
    assert dra_packages(tmp_path) == ["k8s.io/kubernetes/test/e2e/apimachinery", "k8s.io/kubernetes/test/e2e/dra",
                                       "k8s.io/kubernetes/test/e2e/dra/utils"]


@pytest.mark.parametrize("args, word", [(["--backend", "gke"], "--backend"), (["--focus", "(["], "--focus"),
                                        (["--k8s", "1.20"], "minor"), (["--name", "Bad_Name"], "cluster name")])
def test_bad_input_is_one_line_and_exit_2(args: list[str], word: str) -> None:
    out = subprocess.run([sys.executable, "-m", "testbed.cli", "upstream-e2e", *args], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert len(out.stderr.strip().splitlines()) == 1 and word in out.stderr


def test_a_spec_passing_only_on_a_retry_is_counted_passed_and_listed_flaky() -> None:
    summary = summarise("1.34", "kind", _dry(CP, KUBELET), [Spec(CP, "passed", attempts=2), Spec(KUBELET, "passed")], [])
    assert summary.ok and summary.counts["control plane"]["passed"] == 1
    assert summary.flaky == [(CP, 2)] and summary.as_dict()["flaky"] == [(CP, 2)]


def test_json_report_attempts_are_read(tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    report.write_text(json.dumps([{"SpecReports": [{"LeafNodeType": "It", "ContainerHierarchyTexts": ["[sig-node] [DRA] control plane"],
                                                    "LeafNodeText": "must deallocate after use", "State": "passed", "NumAttempts": 2}]}]))
    assert read_specs(report)[0].attempts == 2


def test_parallel_run_hands_ginkgo_flags_before_and_suite_flags_after_the_binary(tmp_path: Path) -> None:
    from testbed.upstream.run import Selection, _parallel

    args = _parallel(Path("/g/ginkgo"), 3, Path("/b/e2e.test"), Path("/k/kc"), Selection(r"\[DRA\]", r"\[Slow\]"), tmp_path, 90, 2)
    cut = args.index("--")
    assert args[cut - 1] == "/b/e2e.test"
    assert {"--procs=3", "--flake-attempts=2", r"--focus=\[DRA\]", r"--skip=\[Slow\]", "--timeout=90m"} <= set(args[:cut])
    assert {"--kubeconfig=/k/kc", "--provider=skeleton"} <= set(args[cut:])


def test_framework_imports_are_read_from_the_releases_e2e_test(tmp_path: Path) -> None:
    # 1.37 moved test/utils/format to test/utils/ktesting/format (the old directory holds only a _test.go file, so a
    # hard-coded import of it broke the build); the suite's own package list stays out
    e2e = tmp_path / "test" / "e2e"
    e2e.mkdir(parents=True)
    (e2e / "e2e_test.go").write_text('import (\n\t"testing"\n\n\t_ "k8s.io/kubernetes/test/e2e/feature"\n\t_ "k8s.io/kubernetes/test/e2e/dra"\n'
                                     '\t_ "k8s.io/kubernetes/test/e2e/framework/debug/init"\n\t_ "k8s.io/kubernetes/test/utils/ktesting/format"\n)\n')
    assert framework_imports(tmp_path) == ["k8s.io/kubernetes/test/e2e/feature", "k8s.io/kubernetes/test/e2e/framework/debug/init",
                                           "k8s.io/kubernetes/test/utils/ktesting/format"]
    (e2e / "e2e_test.go").write_text('import (\n\t_ "k8s.io/kubernetes/test/e2e/dra"\n)\n')
    with pytest.raises(gobuild.BuildError, match="imports no framework packages"):
        framework_imports(tmp_path)
