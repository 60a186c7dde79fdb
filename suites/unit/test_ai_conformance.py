"""`dra-testbed ai-conformance` and `image load` without a cluster: the `go test -json` reader, the junit and
checklist writers, the stand-ins' coverage of what the tests name, the run plan, and bad input (one line, exit 2,
nothing started). The live runs are suites/aiconformance."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml

from suites.unit.test_cluster_lookup import _StandIn
from testbed.aiconformance import checklist, events, junit, run, standins
from testbed.cli.main import main
from testbed.clusters import registry
from testbed.clusters.base import ClusterSpec, ImageLoading

PKG = "github.com/kubernetes-sigs/ai-conformance/test"


def _event(action: str, test: str | None = None, output: str | None = None, elapsed: float | None = None) -> str:
    event = {"Action": action, "Package": PKG}
    if test:
        event["Test"] = test
    if output is not None:
        event["Output"] = output
    if elapsed is not None:
        event["Elapsed"] = elapsed
    return json.dumps(event)


def _stream(violation: bool) -> list[str]:
    """A run of one test with two subtests, the second passing or reporting a VIOLATION, as test2json writes it."""
    t, pos, neg = "TestSecureAcceleratorAccess", "TestSecureAcceleratorAccess/PositiveAccessTest", "TestSecureAcceleratorAccess/NegativeIsolationTest"
    lines = [_event("start"), _event("run", t), _event("output", t, "=== RUN   TestSecureAcceleratorAccess\n"),
             _event("run", pos), _event("output", pos, "    util_test.go:170: PASS: prober isolation/access verified.\n"),
             _event("pass", pos, elapsed=6.1), _event("run", neg)]
    if violation:
        lines += [_event("output", neg, "    util_test.go:174: VIOLATION: Unauthorized Container prober in Pod neg-pod saw 'RESULT: ACCELERATOR_FOUND'!\n"),
                  _event("fail", neg, elapsed=5.0), _event("fail", t, elapsed=20.5), _event("output", None, "FAIL\n"), _event("fail", elapsed=21.0)]
    else:
        lines += [_event("pass", neg, elapsed=5.0), _event("pass", t, elapsed=20.5), _event("output", None, "PASS\n"), _event("pass", elapsed=21.0)]
    return lines


def test_events_give_each_test_and_subtest_its_verdict_and_output() -> None:
    results, package = events.parse_events(_stream(violation=True) + ["not json at all"])
    by_name = {r.name: r for r in results}
    assert [r.name for r in results] == ["TestSecureAcceleratorAccess", "TestSecureAcceleratorAccess/PositiveAccessTest",
                                         "TestSecureAcceleratorAccess/NegativeIsolationTest"]
    assert by_name["TestSecureAcceleratorAccess"].verdict == "fail" and by_name["TestSecureAcceleratorAccess"].elapsed == 20.5
    assert by_name["TestSecureAcceleratorAccess/PositiveAccessTest"].verdict == "pass"
    assert by_name["TestSecureAcceleratorAccess/NegativeIsolationTest"].parent == "TestSecureAcceleratorAccess"
    assert "VIOLATION" in by_name["TestSecureAcceleratorAccess/NegativeIsolationTest"].output[0]
    assert package == ["FAIL", "not json at all"]


def test_junit_names_failures_with_the_violation_and_skips_what_does_not_apply() -> None:
    results, _ = events.parse_events(_stream(violation=True))
    suite = ET.fromstring(junit.junit_xml(results, {"TestGangScheduling": "needs Kueue"}))
    assert (suite.get("tests"), suite.get("failures"), suite.get("errors"), suite.get("skipped")) == ("4", "2", "0", "1")
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    failure = cases["TestSecureAcceleratorAccess/NegativeIsolationTest"].find("failure")
    assert failure is not None and failure.get("message").startswith("util_test.go:174: VIOLATION")
    assert cases["TestSecureAcceleratorAccess/NegativeIsolationTest"].get("classname") == "TestSecureAcceleratorAccess"
    assert cases["TestSecureAcceleratorAccess/PositiveAccessTest"].find("failure") is None
    assert cases["TestSecureAcceleratorAccess"].find("failure").get("message") == "failed subtests: NegativeIsolationTest"
    assert cases["TestGangScheduling"].find("skipped").get("message") == "not applicable: needs Kueue"


def test_junit_counts_a_test_the_binary_never_finished_as_an_error() -> None:
    lines = _stream(violation=False)[:6]  # the binary died after the first subtest
    suite = ET.fromstring(junit.junit_xml(events.parse_events(lines)[0], {}))
    assert suite.get("errors") == "1" and suite.get("failures") == "0"
    assert [c.get("name") for c in suite.iter("testcase") if c.find("error") is not None] == ["TestSecureAcceleratorAccess"]


def _template() -> dict:
    """A checklist in the program's layout (metadata, spec.<area>[id, description, level, status, evidence, notes])."""
    item = lambda id_, level: {"id": id_, "description": f"requirement {id_}", "level": level, "status": "", "evidence": [], "notes": ""}  # noqa: E731
    return {"metadata": {"kubernetesVersion": "v1.36", "platformName": "[Platform Name]", "vendorName": "[Vendor Name]"},
            "spec": {"accelerators": [item("gpu_sharing", "SHOULD")],
                     "schedulingOrchestration": [item("gang_scheduling", "MUST"), item("pod_autoscaling", "MUST")],
                     "security": [item("secure_accelerator_access", "MUST")]}}


@pytest.mark.parametrize("violation, status", [(False, "Implemented"), (True, "Not Implemented")])
def test_checklist_judges_requirements_by_their_tests_and_leaves_the_rest_unassessed(violation, status) -> None:
    results, _ = events.parse_events(_stream(violation))
    who = checklist.Attribution("ours (gpu.nvidia.com)", "kindest node v1.34", ["ubuntu:22.04 = dra-testbed/workload:x"])
    filled = checklist.fill(_template(), "1.37", results, {"TestGangScheduling": "needs Kueue"}, who, {"platformName": "bed"})
    items = {i["id"]: i for area in filled["spec"].values() for i in area}
    assert filled["metadata"] == {"kubernetesVersion": "v1.37", "platformName": "bed", "vendorName": "[Vendor Name]"}
    secure = items["secure_accelerator_access"]
    assert secure["status"] == status
    assert secure["evidence"] == ["file://results/junit.xml#TestSecureAcceleratorAccess", "file://results/e2e.log"]
    assert "DRA driver: ours (gpu.nvidia.com)" in secure["notes"] and "ubuntu:22.04 = dra-testbed/workload:x" in secure["notes"]
    assert (items["gang_scheduling"]["status"], items["gang_scheduling"]["notes"]) == ("N/A", "TestGangScheduling: not applicable (needs Kueue)")
    assert (items["pod_autoscaling"]["status"], items["pod_autoscaling"]["notes"]) == ("", "not assessed by dra-testbed")
    for area, listed in _template()["spec"].items():  # the program forbids changing id, description, level
        assert [(i["id"], i["description"], i["level"]) for i in listed] == \
               [(i["id"], i["description"], i["level"]) for i in filled["spec"][area]]


def test_checklist_takes_our_conformance_verdicts_and_says_when_they_disagree(tmp_path) -> None:
    product = tmp_path / "PRODUCT.yaml"
    product.write_text(yaml.safe_dump({"spec": {"accelerators": [{"id": "gpu_sharing", "status": "Implemented", "notes": "checks: shares.published"}],
                                                "security": [{"id": "secure_accelerator_access", "status": "Not Implemented"}]}}))
    results, _ = events.parse_events(_stream(violation=False))
    filled = checklist.fill(_template(), "1.36", results, {}, checklist.Attribution("d", "n"), {}, checklist.read_ours(product), "file:///r/PRODUCT.yaml")
    items = {i["id"]: i for area in filled["spec"].values() for i in area}
    assert items["gpu_sharing"]["status"] == "Implemented" and items["gpu_sharing"]["evidence"] == ["file:///r/PRODUCT.yaml#gpu_sharing"]
    assert items["secure_accelerator_access"]["status"] == "Implemented"
    assert "the two disagree: Implemented by the AI-conformance tests, Not Implemented by ours" in items["secure_accelerator_access"]["notes"]


def test_the_template_is_the_minors_own_or_the_newest_before_it(tmp_path) -> None:
    folder = tmp_path / "conformance-versions"
    folder.mkdir()
    for minor in (33, 34, 36):
        (folder / f"KubernetesAIConformance-1.{minor}.yaml").write_text("{}")
    assert checklist.template_for(tmp_path, "1.34") == (folder / "KubernetesAIConformance-1.34.yaml", "1.34")
    assert checklist.template_for(tmp_path, "1.35") == (folder / "KubernetesAIConformance-1.34.yaml", "1.34")
    assert checklist.template_for(tmp_path, "1.37") == (folder / "KubernetesAIConformance-1.36.yaml", "1.36")
    with pytest.raises(checklist.TemplateMissing, match="for 1.32 or before"):
        checklist.template_for(tmp_path, "1.32")
    path = checklist.write_checklist(tmp_path, "1.37", folder / "KubernetesAIConformance-1.36.yaml", "1.36", {"metadata": {}})
    assert path.name == "KubernetesAIConformance-1.37.yaml" and "No checklist for 1.37 exists yet" in path.read_text()
    assert yaml.safe_load(path.read_text()) == {"metadata": {}}


def test_every_image_the_tests_name_is_found_and_those_without_stand_in_are_named(tmp_path) -> None:
    (tmp_path / "test").mkdir()
    (tmp_path / "test" / "a_test.go").write_text('c := corev1.Container{Name: "p", Image:   "ubuntu:22.04"}\n')
    (tmp_path / "test" / "b_test.go").write_text('x := corev1.Container{Image: "registry.k8s.io/kueue/kueue:v0.14.0"}\n')
    named = standins.images_named(tmp_path)
    assert named == ["registry.k8s.io/kueue/kueue:v0.14.0", "ubuntu:22.04"]
    assert standins.uncovered(named) == ["registry.k8s.io/kueue/kueue:v0.14.0"]
    loaded: list[tuple[str, str]] = []
    provided = standins.provide(named, lambda source, alias: loaded.append((source, alias)), lambda: "dra-testbed/workload:abc")
    assert loaded == [("dra-testbed/workload:abc", "ubuntu:22.04")] and [s.image for s in provided] == ["ubuntu:22.04"]


def test_the_plan_leaves_out_what_cannot_apply_with_its_reason() -> None:
    chosen = run.plan(["TestSecureAcceleratorAccess", "TestGangScheduling", "TestOther"])
    assert chosen.run == ["TestSecureAcceleratorAccess", "TestOther"] and list(chosen.not_applicable) == ["TestGangScheduling"]
    assert chosen.run_pattern() == "^(TestSecureAcceleratorAccess|TestOther)$"
    narrowed = run.plan(["TestSecureAcceleratorAccess", "TestGangScheduling"], "Secure")
    assert (narrowed.run, narrowed.not_applicable) == (["TestSecureAcceleratorAccess"], {})


def _run_cli(capsys: pytest.CaptureFixture, *argv: str) -> tuple[int, str, str]:
    """Exit code, stdout and stderr of `dra-testbed ARGV`."""
    try:
        return (main(list(argv)), *capsys.readouterr())
    except SystemExit as exc:  # argparse's refusals leave through the parser's error()
        return (int(exc.code or 0), *capsys.readouterr())


@pytest.fixture
def no_build(monkeypatch: pytest.MonkeyPatch):
    """Bad input must be refused before the tests are fetched or built."""
    monkeypatch.setattr("testbed.host.interrupts.install", lambda: False)
    monkeypatch.setattr("testbed.aiconformance.source.ensure_tests", lambda *a, **k: pytest.fail("built despite bad input"))


@pytest.mark.parametrize("argv, says", [
    (["--kubeconfig", "KUBE", "--faults", "cdi-all-devices"], "need a kind bed, not --kubeconfig"),
    (["--kubeconfig", "KUBE", "--driver", "nvidia"], "need a kind bed, not --kubeconfig"),
    (["--kubeconfig", "/nonexistent/kubeconfig"], "no kubeconfig at /nonexistent/kubeconfig"),
    (["--faults", "no-such-fault"], "no-such-fault"),
    (["--run", "Secure("], "is not a regular expression"),
    (["--conformance-report", "/nonexistent"], "no PRODUCT.yaml there"),
    (["--k8s", "1.99"], "1.99"),
    (["--driver", "nvidia", "--faults", "cdi-all-devices"], "--faults switches dra-testbed's own driver on"),
])
def test_ai_conformance_bad_input_is_one_line_exit_2(no_build, capsys, tmp_path, argv, says) -> None:
    (tmp_path / "kube").write_text("")
    argv = [str(tmp_path / "kube") if a == "KUBE" else a for a in argv]
    code, out, err = _run_cli(capsys, "ai-conformance", "--report", str(tmp_path / "report"), *argv)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and says in err, err
    assert not (tmp_path / "report").exists()


class _Kind(_StandIn, ImageLoading):
    backend = "kind"

    def load_images(self, *references: str, workers_only: bool = False) -> None:
        raise AssertionError("loaded despite bad input")


class _Kwok(_StandIn):
    backend = "kwok"


@pytest.fixture
def beds(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """A kind cluster `k` and a KWOK cluster `w`, folders under a state directory of the test's own; a local
    engine holding only dra-testbed/workload:abc."""
    for name, value in (("testbed.host.interrupts.install", lambda: False), ("testbed.host.docker.dockerd.ensure_engine", lambda: "stand-in")):
        monkeypatch.setattr(name, value)
    monkeypatch.setattr(registry, "backend_class", {"kwok": _Kwok, "kind": _Kind}.__getitem__)
    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path))
    monkeypatch.setattr("testbed.host.docker.dockerd.image_present", lambda ref: ref == "dra-testbed/workload:abc")
    registry.cluster_for("kind", "k").create(ClusterSpec(name="k"))
    registry.cluster_for("kwok", "w").create(ClusterSpec(name="w"))


@pytest.mark.parametrize("argv, says", [
    (["--name", "nope", "dra-testbed/workload:abc"], "no cluster named 'nope'"),
    (["--name", "w", "dra-testbed/workload:abc"], "is a kwok cluster, whose nodes run no containers; valid: a kind cluster"),
    (["--name", "k", "dra-testbed/absent:1"], "image 'dra-testbed/absent:1' is not in the local Docker engine"),
    (["--name", "k", "Ubuntu:22.04"], "'Ubuntu:22.04' is not an image reference: give NAME[:TAG]"),
    (["--name", "k", "dra-testbed/workload:abc", "--as", "ubuntu:"], "'ubuntu:' is not an image reference"),
])
def test_image_load_bad_input_is_one_line_exit_2(beds, capsys, argv, says) -> None:
    code, out, err = _run_cli(capsys, "image", "load", *argv)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1 and says in err, err
