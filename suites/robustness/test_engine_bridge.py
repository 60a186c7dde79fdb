"""The default bridge a dockerd makes: ours deletes it once stopped, one that was there before stays.

Each case runs in network and mount namespaces of its own (`unshare --net --mount`), with /run, the cache and
the state of its own, so the bridges it makes and deletes never touch the machine's."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="network namespaces need root")

REPO = Path(__file__).resolve().parents[2]


def _in_own_network(tmp_path: Path, body: str) -> dict:
    """Run `body` (Python; it sets `out`) in namespaces of its own; returns `out`."""
    script = textwrap.dedent("""
        import json, subprocess
        from hostenv.mounts import unmount_below
        unmount_below("/run")
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
        subprocess.run(["mount", "-t", "sysfs", "sysfs", "/sys"], check=True)  # /sys/class/net of this netns
        from testbed import leftovers
        from testbed.clusters.kind import dockerd
        out = {}
        def stand_in_engine():
            # a sleeper stands for the dockerd we started; the bridge is what that dockerd makes
            sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)
            dockerd.run_dir().mkdir(parents=True, exist_ok=True)
            (dockerd.run_dir() / "dockerd.pid").write_text(str(sleeper.pid))
            return sleeper
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = dict(os.environ, DRA_TESTBED_CACHE=str(tmp_path / "cache"), DRA_TESTBED_STATE=str(tmp_path / "state"),
               PYTHONPATH=str(REPO))
    done = subprocess.run(["unshare", "--net", "--mount", "--propagation", "private", sys.executable, "-c", script],
                          env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_bridge_our_dockerd_made_goes_when_it_stops(tmp_path: Path) -> None:
    out = _in_own_network(tmp_path, """
        before = set(leftovers.links())
        sleeper = stand_in_engine()
        dockerd.remember_bridge()
        subprocess.run(["ip", "link", "add", dockerd.BRIDGE, "type", "bridge"], check=True)
        out["while_running"] = sorted(set(leftovers.links()) - before)
        out["stopped"] = dockerd.stop_engine(timeout=5)
        sleeper.wait(timeout=10)
        out["left"] = sorted(set(leftovers.links()) - before)
    """)
    assert out == {"while_running": ["docker0"], "stopped": True, "left": []}, out


def test_a_bridge_that_was_there_before_stays(tmp_path: Path) -> None:
    out = _in_own_network(tmp_path, """
        subprocess.run(["ip", "link", "add", dockerd.BRIDGE, "type", "bridge"], check=True)  # another engine's
        sleeper = stand_in_engine()
        dockerd.remember_bridge()
        out["stopped"] = dockerd.stop_engine(timeout=5)
        sleeper.wait(timeout=10)
        out["links"] = leftovers.links()
    """)
    assert out["stopped"] is True and "docker0" in out["links"], out
