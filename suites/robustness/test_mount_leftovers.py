"""Mounts a run leaves: a stopped dockerd's self-bind of its data root and `ip netns`'s /run/netns are found by
testbed.host.leftovers and taken down by our dockerd stop and the fresh network's teardown.

Each case runs in a private mount namespace (`unshare --mount --propagation private`) with the cache, the
state and /run of its own, so nothing it mounts can reach the machine or a colleague's run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="mount namespaces need root")

REPO = Path(__file__).resolve().parents[2]


def _in_private_mounts(tmp_path: Path, body: str) -> dict:
    """Run `body` (Python; it sets `out`) in a mount namespace of its own with a tmpfs on /run; returns `out`."""
    script = textwrap.dedent("""
        import json, os, subprocess, sys
        from pathlib import Path
        from hostenv.mounts import mount_points, unmount_below
        unmount_below("/run")  # the machine's mounts under /run, in this namespace only (propagation is private)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", "/run"], check=True)
        from testbed.host import leftovers
        out = {}
    """) + textwrap.dedent(body) + "\nprint(json.dumps(out))\n"
    env = dict(os.environ, DRA_TESTBED_CACHE=str(tmp_path / "cache"), DRA_TESTBED_STATE=str(tmp_path / "state"),
               PYTHONPATH=str(REPO))
    done = subprocess.run(["unshare", "--mount", "--propagation", "private", sys.executable, "-c", script], env=env,
                          capture_output=True, text=True, timeout=120, cwd=REPO)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_stopped_dockerds_data_root_bind_is_reported_and_unmounted(tmp_path: Path) -> None:
    out = _in_private_mounts(tmp_path, """
        from testbed.host.docker import dockerd
        data = dockerd.engine_dir() / "data"
        data.mkdir(parents=True)
        subprocess.run(["mount", "--bind", str(data), str(data)], check=True)  # what dockerd does to its data root
        (dockerd.EXEC_ROOT / "netns").mkdir(parents=True)
        subprocess.run(["mount", "-t", "tmpfs", "tmpfs", str(dockerd.EXEC_ROOT / "netns")], check=True)
        out["stale"] = leftovers.stale_mounts()
        out["scan"] = leftovers.scan(Path(os.environ["DRA_TESTBED_STATE"]), stale=True).mounts
        out["plain_scan"] = leftovers.scan(Path(os.environ["DRA_TESTBED_STATE"])).mounts
        out["stopped"] = dockerd.stop_engine()  # no dockerd of ours runs: nothing to stop
        dockerd.unmount_engine()
        out["after"] = leftovers.stale_mounts()
        out["left"] = [m for m in mount_points() if m.startswith(str(data)) or m.startswith(str(dockerd.EXEC_ROOT))]
    """)
    data = str(tmp_path / "cache" / "docker" / "data")
    assert out["stale"] == sorted([data, "/run/dra-testbed-docker/netns"]), out
    assert out["scan"] == out["stale"] and out["plain_scan"] == [], out
    assert out["after"] == [] and out["left"] == [], out


def test_stop_engine_unmounts_what_its_dockerd_left(tmp_path: Path) -> None:
    out = _in_private_mounts(tmp_path, """
        from testbed.host.docker import dockerd
        data = dockerd.engine_dir() / "data"
        data.mkdir(parents=True)
        subprocess.run(["mount", "--bind", str(data), str(data)], check=True)
        sleeper = subprocess.Popen(["sleep", "600"], start_new_session=True)  # stands for the dockerd we started
        dockerd.run_dir().mkdir(parents=True)
        (dockerd.run_dir() / "dockerd.pid").write_text(str(sleeper.pid))
        out["while_running"] = leftovers.stale_mounts()  # in use: not stale
        out["stopped"] = dockerd.stop_engine(timeout=5)
        sleeper.wait(timeout=10)
        out["after"] = [m for m in mount_points() if m.startswith(str(data))]
    """)
    assert out["while_running"] == [] and out["stopped"] is True and out["after"] == [], out


def test_an_empty_run_netns_mount_is_reported_and_released_only_when_ours_and_empty(tmp_path: Path) -> None:
    out = _in_private_mounts(tmp_path, """
        from testbed.host import netns as freshnet
        netns = freshnet.NETNS_DIR
        netns.mkdir()
        subprocess.run(["mount", "--bind", str(netns), str(netns)], check=True)  # what `ip netns add` does
        subprocess.run(["mount", "--make-shared", str(netns)], check=True)
        out["stale_empty"] = leftovers.stale_mounts()
        (netns / "someone-else").touch()  # another run's namespace: neither stale nor ours to unmount
        out["stale_used"] = leftovers.stale_mounts()
        out["released_used"] = freshnet.release_netns_dir(was_mounted=False)
        (netns / "someone-else").unlink()
        out["released_preexisting"] = freshnet.release_netns_dir(was_mounted=True)  # it was there before the run
        out["released"] = freshnet.release_netns_dir(was_mounted=False)
        out["after"] = [m for m in mount_points() if m == str(netns)]
    """)
    assert out["stale_empty"] == ["/run/netns"] and out["stale_used"] == [], out
    assert (out["released_used"], out["released_preexisting"], out["released"]) == (False, False, True), out
    assert out["after"] == [], out
