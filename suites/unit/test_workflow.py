"""The GitHub Actions workflows: every `run:` step calls a nox session the noxfile defines, and the matrix
covers backend x minor x driver, a conformance job and the upstream suite per minor on kind."""

from __future__ import annotations

import dataclasses
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
    released = sorted(key for key, release in RELEASES.items() if not release.prerelease)
    e2e = jobs["e2e"]["strategy"]["matrix"]
    assert sorted(e2e["backend"]) == ["kind", "kwok"] and sorted(e2e["k8s"]) == released and sorted(e2e["driver"]) == ["nvidia", "ours"]
    assert any("nox -s conformance" in s.get("run", "") for s in jobs["conformance"]["steps"])
    upstream = jobs["upstream"]
    assert sorted(upstream["strategy"]["matrix"]["k8s"]) == released
    assert any("nox -s upstream" in s.get("run", "") and "--backend kind" in s["run"] for s in upstream["steps"])


NEXT_LANE_COMBOS = {"e2e": {(b, d) for b in ("kind", "kwok") for d in ("nvidia", "ours")}, "upstream": {(None, None)}}


def next_lane_problems(workflow: dict, releases: dict) -> list[str]:
    """One line per way the `next` lane of the e2e and upstream jobs differs from the pinned pre-releases: each
    pre-release minor runs on every combination in a non-gating `next` entry; every other entry is a release."""
    prereleases = sorted(key for key, release in releases.items() if release.prerelease)
    problems = []
    for job_name, combos in NEXT_LANE_COMBOS.items():
        job = workflow["jobs"][job_name]
        matrix = job["strategy"]["matrix"]
        if job.get("continue-on-error") != "${{ matrix.lane == 'next' }}":
            problems.append(f"{job_name}: continue-on-error is {job.get('continue-on-error')!r}, not the next lane's")
        problems += [f"{job_name}: pre-release {minor} gates (in matrix.k8s)" for minor in prereleases if minor in matrix["k8s"]]
        lane = [entry for entry in matrix.get("include") or [] if entry.get("lane") == "next"]
        for entry in lane:
            if not releases[entry["k8s"]].prerelease:
                problems.append(f"{job_name}: {entry['k8s']} is released, yet in the next lane; move it into matrix.k8s")
        for minor in prereleases:
            have = {(entry.get("backend"), entry.get("driver")) for entry in lane if entry["k8s"] == minor}
            problems += [f"{job_name}: next lane lacks {minor} {combo}" for combo in sorted(combos - have, key=str)]
    return problems


def test_the_next_lane_runs_each_prerelease_without_gating() -> None:
    workflow = _load(ROOT / ".github" / "workflows" / "e2e.yml")
    assert any(release.prerelease for release in RELEASES.values()), "no pre-release pinned: the next lane has nothing to run"
    assert next_lane_problems(workflow, RELEASES) == []


def test_next_lane_problems_are_caught() -> None:
    """The release day (pin moved to 1.38.0 and the lane left as is), a gating pre-release, a missing entry."""
    workflow = _load(ROOT / ".github" / "workflows" / "e2e.yml")
    released = {**RELEASES, "1.38": dataclasses.replace(RELEASES["1.38"], kubernetes="v1.38.0")}
    assert "e2e: 1.38 is released, yet in the next lane; move it into matrix.k8s" in next_lane_problems(workflow, released)
    workflow["jobs"]["upstream"]["strategy"]["matrix"]["k8s"].append("1.38")
    workflow["jobs"]["e2e"]["strategy"]["matrix"]["include"].pop()
    workflow["jobs"]["e2e"]["continue-on-error"] = True
    problems = next_lane_problems(workflow, RELEASES)
    assert "upstream: pre-release 1.38 gates (in matrix.k8s)" in problems
    assert "e2e: next lane lacks 1.38 ('kind', 'nvidia')" in problems
    assert "e2e: continue-on-error is True, not the next lane's" in problems
