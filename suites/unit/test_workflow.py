"""The GitHub Actions workflows: every `run:` step calls a nox session the noxfile defines, and the matrix
covers backend x minor x driver, a conformance job and the upstream suite per minor on kind."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from hostenv.versions import RELEASES
from suites.unit.nox_sessions import nox_sessions, sessions_called

ROOT = Path(__file__).resolve().parents[2]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.y*ml"))


def bad_run_steps(workflow: dict, sessions: set[str]) -> list[str]:
    """One line per `run:` step that calls no nox session or an unknown one."""
    bad = []
    for job_name, job in (workflow.get("jobs") or {}).items():
        for step in job.get("steps") or []:
            if "run" not in step:
                continue
            called = sessions_called(step["run"])
            label = f"{job_name}: {step.get('name') or step['run'][:40]!r}"
            if not called:
                bad.append(f"{label} runs no nox session")
            bad += [f"{label} names nox session {name!r}, not in noxfile.py" for name in called if name not in sessions]
    return bad


def _load(path: Path) -> dict:
    return yaml.safe_load(path.read_text())


def test_there_is_a_workflow_and_the_noxfile_has_its_sessions() -> None:
    assert WORKFLOWS
    assert {"tests", "e2e", "conformance", "upstream", "nvidia-plugin"} <= nox_sessions(ROOT / "noxfile.py")


@pytest.mark.parametrize("path", WORKFLOWS, ids=lambda p: p.name)
def test_every_run_step_names_an_existing_nox_session(path: Path) -> None:
    assert bad_run_steps(_load(path), nox_sessions(ROOT / "noxfile.py")) == []


def test_a_planted_bad_step_is_caught(tmp_path: Path) -> None:
    workflow = _load(WORKFLOWS[0])
    steps = next(iter(workflow["jobs"].values()))["steps"]
    steps.append({"name": "typo", "run": "python3 -m pip install --quiet nox && python3 -m nox -s e2ee"})
    steps.append({"name": "bare", "run": "pytest suites"})
    planted = tmp_path / "planted.yml"
    planted.write_text(yaml.safe_dump(workflow))
    bad = bad_run_steps(_load(planted), nox_sessions(ROOT / "noxfile.py"))
    assert len(bad) == 2
    assert "'e2ee', not in noxfile.py" in bad[0] and "runs no nox session" in bad[1]


def test_session_parsing_reads_decorators_and_command_lines(tmp_path: Path) -> None:
    noxfile = tmp_path / "noxfile.py"
    noxfile.write_text("import nox\n@nox.session\ndef a(s): pass\n@nox.session(name='b-c')\ndef b(s): pass\ndef helper(): pass\n")
    assert nox_sessions(noxfile) == {"a", "b-c"}
    assert sessions_called("pip install nox && python3 -m nox -s a b-c -- --x") == ["a", "b-c"]
    assert sessions_called("nox --session=a") == ["a"]
    assert sessions_called("echo nox-free") == []


def test_matrix_covers_backend_minor_driver_and_upstream_per_minor() -> None:
    jobs = {name: job for path in WORKFLOWS for name, job in _load(path)["jobs"].items()}
    minors = sorted(RELEASES)
    e2e = jobs["e2e"]["strategy"]["matrix"]
    assert sorted(e2e["backend"]) == ["kind", "kwok"] and sorted(e2e["k8s"]) == minors and sorted(e2e["driver"]) == ["nvidia", "ours"]
    assert any("nox -s conformance" in s.get("run", "") for s in jobs["conformance"]["steps"])
    upstream = jobs["upstream"]
    assert sorted(upstream["strategy"]["matrix"]["k8s"]) == minors
    assert any("nox -s upstream" in s.get("run", "") and "--backend kind" in s["run"] for s in upstream["steps"])
