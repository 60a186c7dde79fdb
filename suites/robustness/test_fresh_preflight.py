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
# as root, setpriv runs the check as nobody (it exec's still holding its capabilities, so an interpreter under a
# root-only /root starts); without root the check runs as we are, and switching user would need root anyway
AS_NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"] if ROOT else []


@pytest.mark.skipif(ROOT and not shutil.which("setpriv"), reason="util-linux setpriv runs the check as another user")
def test_without_root_it_says_so_in_one_line(tmp_path: Path) -> None:
    tmp_path.chmod(0o777)
    out = subprocess.run([*AS_NOBODY, sys.executable, "-I", "-c",
                          f"import sys; sys.path.insert(0, {str(REPO)!r}); from testbed.fresh import main; "
                          f"sys.exit(main(['--workdir', {str(tmp_path)!r}]))"],
                         capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert out.returncode == 2, out.stderr
    assert out.stderr.strip().splitlines() == [out.stderr.strip()] and "needs root" in out.stderr
    assert list(tmp_path.iterdir()) == []
