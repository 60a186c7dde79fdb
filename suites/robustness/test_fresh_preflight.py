"""`nox -s fresh` says in one line why it cannot run (not root) and starts nothing."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
ROOT = os.geteuid() == 0
# As root, setpriv runs the check as nobody. The interpreter may live under a root-only /root (pyenv; the fresh
# machine has it at the same path): nobody keeps CAP_DAC_READ_SEARCH, ambient so that it survives the exec, to
# load it. Without it the loader failed there (libpython: Permission denied) on a kernel that checks each path.
# The check under test asks for euid 0, which nobody is not. Without root the check runs as we are.
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
             "--inh-caps=+dac_read_search", "--ambient-caps=+dac_read_search"] if ROOT else []


@pytest.mark.skipif(ROOT and not shutil.which("setpriv"), reason="util-linux setpriv runs the check as another user")
def test_without_root_it_says_so_in_one_line(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    out = subprocess.run([*AS_NOBODY, sys.executable, "-I", "-c",
                          f"import sys; sys.path.insert(0, {str(REPO)!r}); from testbed.fresh.machine import main; "
                          f"sys.exit(main(['--workdir', {str(tmp_path)!r}]))"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "needs root" in out.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_host_package_it_cannot_install_is_one_line_and_nothing_is_made(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A fresh host has no iptables (it came with docker.io before): the run installs it or says so, never a traceback."""
    from testbed.fresh import machine as fresh
    from testbed.host import hostdeps

    absent = hostdeps.Package("iptables", (str(tmp_path / "no-such-iptables"),))
    monkeypatch.setitem(hostdeps.FEATURES, "fresh", (hostdeps.FEATURES["fresh"][0], (absent,)))
    monkeypatch.setenv(hostdeps.SKIP_ENV, "1")  # apt-get may not run: the missing package must be named instead
    monkeypatch.setattr(fresh.os, "geteuid", lambda: 0)

    def got_past_the_preflight(*args: object, **kwargs: object) -> None:
        raise AssertionError("the run went on to make its network without the host's packages")

    monkeypatch.setattr(fresh, "private_network", got_past_the_preflight)
    workdir = tmp_path / "work"
    workdir.mkdir()
    with pytest.raises(fresh.FreshError) as raised:
        fresh.run(workdir, ["tests"])
    assert "\n" not in str(raised.value) and "iptables" in str(raised.value) and "apt-get install" in str(raised.value)
    assert list(workdir.iterdir()) == []


def test_the_fresh_feature_names_every_host_command_the_run_uses() -> None:
    from testbed.host import hostdeps

    provided = {probe for package in hostdeps.FEATURES["fresh"][1] for probe in package.provides}
    assert {"debootstrap", "iptables", "ip"} <= provided
