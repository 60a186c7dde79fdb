"""`try` inputs without a cluster: standard input, directories (kubectl's -R), generateName, lists, field lines,
the project of an unserved kind, `--node` fleets; bad input is one line and exit 2 before any bed starts."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import pytest

from hostenv.processes import run_child
from testbed.outcomes.documents import load
from testbed.outcomes.layouts import fleet_layout
from testbed.outcomes.locator import duplicate_keys, line_of
from testbed.outcomes.manifests import ManifestError
from testbed.outcomes.projects import project_of

JOB = "apiVersion: batch/v1\nkind: Job\nmetadata: {generateName: sweep-}\nspec: {template: {spec: {containers: []}}}\n"


def _try(*args: str, stdin=None, shell_suffix: str = "") -> subprocess.CompletedProcess:
    if shell_suffix:  # for redirections the subprocess module cannot express (a closed descriptor)
        command = " ".join([sys.executable, "-m", "testbed.cli", "try", *args]) + shell_suffix
        return subprocess.run(command, shell=True, capture_output=True, text=True, timeout=120)
    return run_child([sys.executable, "-m", "testbed.cli", "try", *args], input=stdin, capture_output=True,
                     text=True, timeout=120, env=dict(os.environ))


def test_standard_input_and_generate_name_are_read_as_kubectl_create_reads_them() -> None:
    (job,) = load(["-", "-"], stdin=io.StringIO(JOB))  # `-` twice reads standard input once
    assert (job.source, job.name, job.generated) == ("<stdin>:1", "sweep-", True)
    assert job.label() == "<stdin>:1 (Job sweep-*)"


def test_a_directory_is_its_own_files_unless_recursive(tmp_path: Path) -> None:
    (tmp_path / "deeper").mkdir()
    (tmp_path / "top.yaml").write_text(JOB.replace("sweep-", "top-"))
    (tmp_path / "deeper" / "low.json").write_text('{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "low"}}')
    (tmp_path / "notes.txt").write_text("not a manifest")
    assert [m.name for m in load([tmp_path])] == ["top-"]
    assert sorted(m.name for m in load([tmp_path], recursive=True)) == ["low", "top-"]
    with pytest.raises(ManifestError, match=r"empty: no \*.yaml, \*.yml, \*.json files in this directory \(subdirectories are read with -R\)"):
        load([_empty(tmp_path)])


def _empty(tmp_path: Path) -> Path:
    empty = tmp_path / "deeper" / "empty"
    empty.mkdir()
    (empty / "deeper").mkdir()
    return empty


def test_list_documents_give_their_items_with_their_lines(tmp_path: Path) -> None:
    (tmp_path / "list.yaml").write_text("apiVersion: v1\nkind: List\nitems:\n- apiVersion: v1\n  kind: ConfigMap\n"
                                        "  metadata: {name: a}\n- apiVersion: v1\n  kind: ConfigMap\n  metadata: {name: b}\n")
    a, b = load([tmp_path / "list.yaml"])
    assert (a.name, a.line, b.name, b.line) == ("a", 4, "b", 7)


def test_field_paths_map_to_lines_and_duplicates_are_found(tmp_path: Path) -> None:
    (tmp_path / "c.yaml").write_text("# a comment\napiVersion: v1\nkind: Pod\nmetadata: {name: p}\nspec:\n  containers:\n"
                                     "  - name: a\n    image: x\n  - name: b\n    imag: y\n    image: y\n    image: z\n")
    (pod,) = load([tmp_path / "c.yaml"])
    assert line_of(pod.node, "spec.containers[1].imag") == 10
    assert line_of(pod.node, "spec.containers[1].nothing.deeper") == 9  # the deepest part that exists
    assert [(d.path, d.line) for d in duplicate_keys(pod.node)] == [("spec.containers[1].image", 12)]


def test_unserved_groups_name_their_project() -> None:
    assert project_of("kueue.x-k8s.io/v1beta1") == "Kueue"
    assert project_of("jobset.x-k8s.io/v1alpha2") == "JobSet"
    assert project_of("ray.io/v1") == "KubeRay"
    assert project_of("trainer.kubeflow.org/v1alpha1") == "Kubeflow Trainer"
    assert project_of("v1") is None and project_of("example.com/v1") is None


def test_fleet_from_node_flags_as_up_takes_them() -> None:
    layout = fleet_layout(None, ["a=h100-80gb:2:whole", "b=h100-80gb:1:dynamic-mig"])
    assert [(n.name, n.count, str(n.mode)) for n in layout.nodes] == [("a", 2, "whole"), ("b", 1, "dynamic-mig")]
    assert layout.name == "nodes-a-b"
    assert fleet_layout("h100-only").name == "h100-only"


@pytest.mark.parametrize("args, stdin, suffix, message", [
    (["-f", "-", "--fleet", "h100-only"], "", "", "no manifests: the input holds no YAML documents"),
    (["-f", "-", "--fleet", "h100-only"], None, " <&-", "cannot read standard input (-): it is closed"),
    (["-f", "-", "--fleet", "h100-only"], "kind: [\n", "", "<stdin> is not valid YAML"),
    (["--fleet", "h100-only"], None, "", "no input: give manifest files, directories of them, or -f - for standard input"),
    (["-f", "-", "--fleet", "h100-only", "--node", "a=h100-80gb:1:whole"], JOB, "", "give either --fleet LAYOUT or --node flags"),
    (["-f", "-"], JOB, "", "no fleet: give --fleet LAYOUT"),
])
def test_bad_input_is_one_line_and_exit_2_before_any_bed(args: list[str], stdin: str | None, suffix: str, message: str) -> None:
    out = _try(*args, stdin=stdin, shell_suffix=suffix)
    assert out.returncode == 2, out.stderr
    assert message in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr
    assert "starting kwok cluster" not in out.stdout + out.stderr
