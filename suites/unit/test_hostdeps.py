"""Host packages: installed through apt-get when missing, or one line saying what is missing and how to get it.

apt-get here is a stand-in script on PATH that logs its arguments and "installs" a package by creating
the file that proves it; the code path (lock, update, install, streamed progress, re-check) is the real one.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

from testbed.host import hostdeps

FAKE_APT = """#!/bin/sh
echo "$@" >> {log}
case " $* " in
  *" update "*) echo "Get:1 http://deb.example bookworm InRelease [151 kB]"; echo "Fetched 151 kB in 1s";;
  *" install "*) {install};;
esac
"""


@pytest.fixture
def fake_feature(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A feature `demo` needing package `demo-pkg`, proven by a file under tmp_path that does not exist yet."""
    probe = tmp_path / "installed" / "demo.h"
    package = hostdeps.Package("demo-pkg", (str(probe),))
    monkeypatch.setitem(hostdeps.FEATURES, "demo", ("the demo feature", (package,)))
    monkeypatch.setattr(hostdeps, "_lock_path", lambda: tmp_path / "apt.lock")
    monkeypatch.setattr(hostdeps.tempfile, "gettempdir", lambda: str(tmp_path))
    monkeypatch.delenv(hostdeps.SKIP_ENV, raising=False)
    return probe


def _fake_apt(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, install: str) -> Path:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    calls = tmp_path / "apt-calls.log"
    script = bin_dir / "apt-get"
    script.write_text(FAKE_APT.format(log=calls, install=install))
    script.chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(hostdeps.os, "geteuid", lambda: 0)
    return calls


def test_missing_package_is_installed_once_with_update_first(fake_feature: Path, tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    calls = _fake_apt(tmp_path, monkeypatch, f"mkdir -p {fake_feature.parent} && touch {fake_feature}; echo 'Setting up demo-pkg (1.0)'")
    assert [p.name for p in hostdeps.missing("demo")] == ["demo-pkg"]
    hostdeps.ensure("demo")
    assert fake_feature.exists()
    lines = calls.read_text().splitlines()
    assert [line.split()[-1] for line in lines] == ["update", "demo-pkg"]
    assert "install -y demo-pkg" in lines[1]
    err = capsys.readouterr().err
    assert "apt: Get:1" in err and "apt: Setting up demo-pkg" in err  # apt's progress lines, as they came
    hostdeps.ensure("demo")  # present now: apt-get is not run again
    assert len(calls.read_text().splitlines()) == 2


def test_without_apt_rights_one_line_names_package_and_command(fake_feature: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(hostdeps.os, "geteuid", lambda: 1000)
    monkeypatch.setenv("PATH", "/nonexistent")  # no sudo either
    with pytest.raises(hostdeps.HostDepsMissing) as info:
        hostdeps.ensure("demo")
    message = str(info.value)
    assert "\n" not in message
    assert "the demo feature" in message and "sudo apt-get install -y demo-pkg" in message


def test_no_apt_switch_reports_instead_of_installing(fake_feature: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _fake_apt(tmp_path, monkeypatch, "exit 1")
    monkeypatch.setenv(hostdeps.SKIP_ENV, "1")
    with pytest.raises(hostdeps.HostDepsMissing, match="demo-pkg"):
        hostdeps.ensure("demo")
    assert not calls.exists()
    hostdeps.prefetch("demo")  # cannot install: says nothing, leaves it to ensure
    assert not calls.exists()


def test_apt_failure_is_one_line_with_apts_error(fake_feature: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_apt(tmp_path, monkeypatch, "echo 'E: Unable to locate package demo-pkg'; exit 100")
    with pytest.raises(hostdeps.HostDepsMissing) as info:
        hostdeps.ensure("demo")
    assert "\n" not in str(info.value)
    assert "E: Unable to locate package demo-pkg" in str(info.value)


def test_install_that_leaves_probe_missing_is_reported(fake_feature: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _fake_apt(tmp_path, monkeypatch, "true")
    with pytest.raises(hostdeps.HostDepsMissing, match="still missing"):
        hostdeps.ensure("demo")


def test_every_feature_names_real_debian_packages() -> None:
    names = {p.name for _, packages in hostdeps.FEATURES.values() for p in packages}
    assert {"docker.io", "debootstrap", "libseccomp-dev", "chromium"} <= names
    if shutil.which("apt-cache") and any(Path("/var/lib/apt/lists").glob("*Packages*")):
        policy = subprocess.run(["apt-cache", "policy", *sorted(names)], capture_output=True, text=True).stdout
        unknown = [n for n in names if f"{n}:" not in policy]
        assert not unknown, f"not known to apt: {unknown}"
    with pytest.raises(ValueError, match="valid:"):
        hostdeps.missing("no-such-feature")


def test_the_machine_wide_lock_lives_in_run_lock_not_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A lock file is no record: it goes where the FHS puts locks (a tmpfs), not among /tmp's files that outlive runs."""
    run_lock = tmp_path / "run-lock"
    run_lock.mkdir()
    monkeypatch.setattr(hostdeps, "RUN_LOCK", run_lock)
    assert hostdeps._lock_path() == run_lock / "dra-testbed-apt.lock"
    monkeypatch.setattr(hostdeps, "RUN_LOCK", tmp_path / "absent")  # a machine without /run/lock: the temp folder
    assert hostdeps._lock_path().parent == Path(hostdeps.tempfile.gettempdir())
