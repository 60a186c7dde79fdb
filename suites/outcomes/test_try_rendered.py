"""`try -k DIR` and `try --helm CHART`: the YAML the real kustomize and helm write (built from their Go modules,
cached) is what the loader sees; bad input is one line and exit 2, nothing started. The chart and the
overlay under data/ were written for these tests. The first run on a machine builds both tools (minutes)."""

from __future__ import annotations

import os
import shutil
import sys
from pathlib import Path

import pytest

from hostenv.processes import run_child
from hostenv.versions import RENDERERS
from testbed.outcomes.documents import load
from testbed.outcomes.inputs import HelmChart, Kustomization
from testbed.toolchain.projects import PROJECTS
from testbed.toolchain.renderers import RENDERER_PROJECTS, ensure_renderer
from testbed.toolchain.resolve import ToolchainError

DATA = Path(__file__).resolve().parent / "data"
CHART = DATA / "gpu-job-chart"
BASE, OVERLAY = DATA / "kustomize" / "base", DATA / "kustomize" / "two-gpus"


@pytest.fixture(scope="module", autouse=True)
def renderers(request: pytest.FixtureRequest) -> None:
    """The tools built here on a cold machine, so the commands below print their one line and nothing else. helm
    takes minutes to build cold: the tests that need it are marked `helm` and run in `nox -s renderers`."""
    ensure_renderer("kustomize")
    if any(item.get_closest_marker("helm") for item in request.session.items if item.module is request.module):
        ensure_renderer("helm")


def _count(manifest) -> int:
    body = manifest.body["spec"]
    body = body.get("spec", body)  # a template's claim spec sits one level deeper
    return body["devices"]["requests"][0]["exactly"]["count"]


def test_a_kustomization_is_what_kustomize_build_writes() -> None:
    base = {m.kind: m for m in load([Kustomization(BASE)])}
    claim, pod = load([Kustomization(OVERLAY)])  # loaded in creation order: the claim before its pod
    assert (claim.kind, claim.name, pod.kind, pod.name) == ("ResourceClaim", "shared-gpus", "Pod", "inference")
    assert (_count(base["ResourceClaim"]), _count(claim)) == (1, 2)  # the overlay's patch, applied by kustomize
    assert claim.body["metadata"]["labels"] == pod.body["metadata"]["labels"] == {"team": "vision"}
    assert claim.source.startswith(f"{OVERLAY} (kustomize build):")


@pytest.mark.helm
def test_a_chart_renders_with_its_values_files_and_set_pairs_in_helm_order() -> None:
    template, pod = load([HelmChart(CHART)])
    assert (template.kind, template.name, pod.name, _count(template)) == ("ResourceClaimTemplate", "try-gpus", "try-trainer", 1)
    assert pod.body["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] == "try-gpus"
    eight, _ = load([HelmChart(CHART, values=(DATA / "eight-gpus.yaml",), release="train", kube_version="v1.34.4")])
    assert (eight.name, _count(eight)) == ("train-gpus", 8)
    # --set overrides values files, as helm's own precedence has it
    four, _ = load([HelmChart(CHART, values=(DATA / "eight-gpus.yaml",), settings=("gpus=4",))])
    assert _count(four) == 4
    assert template.source.startswith(f"{CHART} (helm template):")


CRD = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: trainings.example.invalid}
spec:
  group: example.invalid
  names: {kind: Training, plural: trainings}
  scope: Namespaced
  versions:
  - {name: v1, served: true, storage: true, schema: {openAPIV3Schema: {type: object}}}
"""


@pytest.mark.helm
def test_a_chart_gives_its_crds_and_sees_the_beds_kubernetes_release(tmp_path: Path) -> None:
    chart = tmp_path / "with-crd"
    shutil.copytree(CHART, chart)
    (chart / "crds").mkdir()
    (chart / "crds" / "training.yaml").write_text(CRD)  # `helm install` creates these; `helm template` only when asked
    crd, template, _ = load([HelmChart(chart, kube_version="v1.34.4")])
    assert (crd.kind, crd.name) == ("CustomResourceDefinition", "trainings.example.invalid")
    assert template.body["metadata"]["annotations"]["gpu-job/rendered-for"] == "v1.34.4"


def test_renderers_are_cached_apart_from_the_cluster_binaries(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    # `toolchain ensure` builds PROJECTS for every minor; the renderers are built only when `try` needs one
    assert not set(RENDERER_PROJECTS) & set(PROJECTS)
    built = ensure_renderer("kustomize")
    assert built.parent.name == RENDERERS["kustomize"] and ensure_renderer("kustomize") == built
    stand_in = tmp_path / "kustomize"
    stand_in.write_text("#!/bin/sh\nprintf 'apiVersion: v1\\nkind: ConfigMap\\nmetadata: {name: from-override}\\n'\n")
    stand_in.chmod(0o755)
    monkeypatch.setenv("DRA_TESTBED_BINARY_KUSTOMIZE", str(stand_in))
    assert [m.name for m in load([Kustomization(BASE)])] == ["from-override"]
    monkeypatch.setenv("DRA_TESTBED_BINARY_KUSTOMIZE", str(tmp_path / "absent"))
    with pytest.raises(ToolchainError, match="DRA_TESTBED_BINARY_KUSTOMIZE: .*absent is not an executable file"):
        ensure_renderer("kustomize")


def _broken_kustomization(tmp_path: Path) -> Path:
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "kustomization.yaml").write_text("resources:\n- missing-claim.yaml\n")
    return tmp_path / "broken"


@pytest.mark.parametrize("args, message", [
    (["-k", "{tmp}/nowhere"], "-k {tmp}/nowhere: no such directory; give a directory holding a kustomization.yaml"),
    (["-k", str(DATA)], f"-k {DATA}: no kustomization.yaml in it"),
    (["-k", "{broken}"], "-k {broken}: accumulating resources: accumulation err='accumulating resources from 'missing-claim.yaml'"),
    (["--helm", "{tmp}/no-chart"], "--helm {tmp}/no-chart: no such chart; give a chart directory (holding Chart.yaml) or a packaged .tgz"),
    (["--helm", str(DATA)], f"--helm {DATA}: not a chart (no Chart.yaml in it)"),
    pytest.param(["--helm", str(CHART), "--values", "{tmp}/absent.yaml"], "--values {tmp}/absent.yaml: no such file; give a YAML file of chart values", marks=pytest.mark.helm),
    pytest.param(["--helm", str(CHART), "--set", "gpus=null"], "gpus: how many GPUs the trainer gets", marks=pytest.mark.helm),
    pytest.param(["--helm", str(CHART), "--release", "Not_A_Name"], "--helm " + str(CHART) + ": release name check failed", marks=pytest.mark.helm),
    (["--values", str(DATA / "eight-gpus.yaml")], "--values and --set are a Helm chart's: give the chart with --helm CHART"),
])
def test_bad_rendered_input_is_one_line_and_exit_2_with_nothing_started(args: list[str], message: str, tmp_path: Path) -> None:
    fill = {"tmp": tmp_path, "broken": _broken_kustomization(tmp_path)}
    state = tmp_path / "state"
    out = run_child([sys.executable, "-m", "testbed.cli", "try", *(a.format(**fill) for a in args), "--fleet", "h100-only"],
                    capture_output=True, text=True, timeout=300, env={**os.environ, "DRA_TESTBED_STATE": str(state)})
    assert out.returncode == 2, out.stderr
    assert message.format(**fill) in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert not state.exists() or not any(state.rglob("*")), "a bed was started for bad input"
