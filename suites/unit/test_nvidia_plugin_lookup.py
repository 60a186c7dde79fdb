"""Where NVIDIA's gpu-kubelet-plugin comes from (testbed/drivers/nvidia/binary.py): each step of the order wins
over the later ones, an unusable explicit path and an empty search are one line each, the build step never
waits on a network it cannot reach, a suite that needs the plugin fails (never skips) without one, and on
this checkout the reference binary beside it is found with no variable set."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import testbed
from hostenv.dirs import SHARED_ENV
from suites.nvidia.conftest import plugin_absent_env
from testbed.drivers.nvidia import binary, build
from testbed.drivers.nvidia.binary import PLUGIN_ENV, REFERENCE, PluginNotFound, find_plugin, plugin_binary
from testbed.toolchain import download

CHECKOUT = Path(testbed.__file__).resolve().parents[1]
STEPS = ("explicit", "variable", "cache", "reference", "build")


def _executable(path: Path) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("#!/bin/sh\nexit 0\n")
    path.chmod(0o755)
    return path


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A cache and shared folder of our own (empty), offline, no variable: nothing to find yet."""
    for name, value in plugin_absent_env(tmp_path / "places").items():
        monkeypatch.setenv(name, value)
    return tmp_path


def _provide(step: str, places: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make `step` able to give a binary; returns the path it would give."""
    if step == "explicit":
        return _executable(places / "flag" / "gpu-kubelet-plugin")
    if step == "variable":
        monkeypatch.setenv(PLUGIN_ENV, str(_executable(places / "variable" / "gpu-kubelet-plugin")))
        return places / "variable" / "gpu-kubelet-plugin"
    if step == "cache":
        return _executable(build.cached_path())
    if step == "reference":
        return _executable(binary.reference_path())
    built = _executable(places / "built" / "gpu-kubelet-plugin")
    monkeypatch.setattr(build, "build_if_possible", lambda: built)
    return built


@pytest.mark.parametrize("winner", STEPS)
def test_each_step_wins_over_the_later_ones(winner: str, places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    provided = {step: _provide(step, places, monkeypatch) for step in STEPS[STEPS.index(winner):]}
    if winner != "build":  # a later step is never even tried: a build would be minutes and the network
        monkeypatch.setattr(build, "build_if_possible", lambda: pytest.fail("the build step was tried"))
    found = find_plugin(provided["explicit"] if winner == "explicit" else None)
    assert found.path == provided[winner].resolve()
    words = {"explicit": "--driver-binary", "variable": PLUGIN_ENV, "cache": build.PINNED_COMMIT[:12],
             "reference": "beside the checkout", "build": "built now"}
    assert words[winner] in found.source and str(found.path) in str(found)
    assert plugin_binary(provided["explicit"] if winner == "explicit" else None) == found.path


@pytest.mark.parametrize("given_by", ["flag", "variable"])
def test_an_explicit_path_that_is_not_executable_is_one_line_naming_it(given_by: str, places: Path,
                                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    bad = places / "plugin.txt"
    bad.write_text("not a program")
    _provide("reference", places, monkeypatch)  # found later in the order, but an explicit path is never passed over
    if given_by == "variable":
        monkeypatch.setenv(PLUGIN_ENV, str(bad))
    with pytest.raises(PluginNotFound) as caught:
        find_plugin(bad if given_by == "flag" else None)
    message = str(caught.value)
    assert "\n" not in message and str(bad) in message and "is not an executable file" in message
    assert ("--driver-binary" if given_by == "flag" else PLUGIN_ENV) in message


def test_nothing_found_is_one_line_saying_how_to_provide_it(places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(download, "reachable", lambda *a, **k: pytest.fail("offline, yet the network was probed"))
    with pytest.raises(PluginNotFound) as caught:
        find_plugin()
    message = str(caught.value)
    assert "\n" not in message
    for way in ("--driver-binary PATH", f"{PLUGIN_ENV}=PATH", str(binary.reference_path()), build.REPO_ENV):
        assert way in message, way
    assert "DRA_TESTBED_OFFLINE is set" in message  # and why no build was tried


def test_an_unreachable_repository_is_given_up_at_once(places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(download.OFFLINE_ENV)
    monkeypatch.setenv(build.REPO_ENV, "https://192.0.2.1/dra-driver-nvidia-gpu.git")  # TEST-NET-1: never answers
    started = time.monotonic()
    with pytest.raises(PluginNotFound, match="192.0.2.1:443 is not reachable"):
        find_plugin()
    assert time.monotonic() - started < 3 * download.PROBE_TIMEOUT
    assert not build.cached_path().parent.exists() or not any(build.cached_path().parent.iterdir())


def test_a_clone_without_the_pinned_commit_fails_the_build_in_one_line(places: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    clone = places / "clone"
    subprocess.run(["git", "init", "-q", str(clone)], check=True)
    subprocess.run(["git", "-C", str(clone), "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty",
                    "-m", "not the pinned commit"], check=True)
    monkeypatch.setenv(build.REPO_ENV, str(clone))  # a local clone: tried even offline, it needs no network
    with pytest.raises(PluginNotFound) as caught:
        find_plugin()
    message = str(caught.value)
    assert "\n" not in message and "not built: `git fetch" in message and "build.log" in message
    assert not build.cached_path().exists() and not list(build.cached_path().parent.glob(".src-*"))


@pytest.mark.parametrize(("repo", "probe"), [
    ("https://github.com/kubernetes-sigs/dra-driver-nvidia-gpu.git", "https://github.com:443"),
    ("http://mirror.example:8080/nv.git", "http://mirror.example:8080"),
    ("git@github.com:kubernetes-sigs/dra-driver-nvidia-gpu.git", "ssh://github.com:22"),
    ("ssh://git@example.org/nv.git", "ssh://example.org:22"),
    ("/srv/clones/dra-driver-nvidia-gpu", None),
    ("file:///srv/clones/dra-driver-nvidia-gpu", None),
])
def test_the_probe_is_the_host_a_fetch_connects_to(repo: str, probe: str | None) -> None:
    assert build.remote_probe(repo) == probe


def _suite_needing_the_plugin(tmp_path: Path, env: dict[str, str]) -> subprocess.CompletedProcess:
    """pytest on a test that takes the suites' `nvidia_binary` fixture, under CI, with `env`."""
    (tmp_path / "conftest.py").write_text("from suites.nvidia.conftest import nvidia_binary  # noqa: F401\n")
    (tmp_path / "test_needs_plugin.py").write_text("def test_runs_nvidias_plugin(nvidia_binary):\n    pass\n")
    env = {**os.environ, **plugin_absent_env(tmp_path / "empty"), **env, "CI": "true", "PYTHONPATH": str(CHECKOUT)}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--rootdir", str(tmp_path),
                           str(tmp_path / "test_needs_plugin.py")], capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)


def test_a_suite_needing_the_plugin_fails_rather_than_skips_in_ci(tmp_path: Path) -> None:
    """The fixture with nothing to find: an error carrying the lookup's line, exit 1, no skip."""
    run = _suite_needing_the_plugin(tmp_path, {})
    assert run.returncode == 1, run.stdout + run.stderr
    assert "1 error" in run.stdout and "skipped" not in run.stdout and " passed" not in run.stdout, run.stdout
    assert "NVIDIA's gpu-kubelet-plugin is needed here and none was found" in run.stdout, run.stdout


def test_a_suite_says_which_plugin_it_runs(tmp_path: Path) -> None:
    plugin = _executable(tmp_path / "mine" / "gpu-kubelet-plugin")
    run = _suite_needing_the_plugin(tmp_path, {PLUGIN_ENV: str(plugin)})
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"NVIDIA's gpu-kubelet-plugin: {plugin} (${PLUGIN_ENV})" in run.stdout, run.stdout


def test_this_checkout_finds_the_reference_binary_beside_it_with_no_variable(tmp_path: Path) -> None:
    """The real lookup, as `nox -s tests` runs it: nothing set, an empty cache, the shared folder beside us."""
    env = {k: v for k, v in os.environ.items() if k not in (PLUGIN_ENV, SHARED_ENV)}
    env["DRA_TESTBED_CACHE"] = str(tmp_path)  # a plugin built into the real cache would win over the reference
    run = subprocess.run([sys.executable, "-m", binary.__name__], capture_output=True, text=True, timeout=60, env=env)
    expected = (CHECKOUT.parent / "shared" / REFERENCE).resolve()
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"{expected} (the reference binary beside the checkout)"
