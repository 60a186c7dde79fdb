"""What a dockerd adds to the host network: ours takes its default bridge, firewall rules and forwarding back once
stopped; a bridge or rule that was there before (or is someone else's) stays.

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
        from testbed.host import leftovers
        from testbed.host.docker import dockerd
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


def test_the_firewall_rules_and_forwarding_our_dockerd_added_go_when_it_stops(tmp_path: Path) -> None:
    out = _in_own_network(tmp_path, """
        from testbed.host.docker import firewall as fw
        def ipt(*args):
            subprocess.run(["iptables", *args], check=True, capture_output=True)
        forward = fw.FORWARD_SYSCTL
        ipt("-N", "MINE"); ipt("-A", "FORWARD", "-j", "MINE")  # someone else's, there before
        forward.write_text("0")
        before = {t: fw.save(t) for t in fw.TABLES}
        sleeper = stand_in_engine()
        dockerd.remember_bridge()
        fw.remember(dockerd.firewall_marker())
        # what a dockerd adds for its default bridge and a user-defined network (kind's), as seen on this machine
        ipt("-N", "DOCKER"); ipt("-N", "DOCKER-USER"); ipt("-N", "DOCKER-ISOLATION-STAGE-1")
        ipt("-A", "FORWARD", "-j", "DOCKER-USER"); ipt("-A", "FORWARD", "-j", "DOCKER-ISOLATION-STAGE-1")
        ipt("-A", "FORWARD", "-o", "docker0", "-j", "DOCKER"); ipt("-A", "FORWARD", "-i", "docker0", "!", "-o", "docker0", "-j", "ACCEPT")
        ipt("-A", "DOCKER-USER", "-j", "RETURN")
        ipt("-t", "nat", "-N", "DOCKER")
        ipt("-t", "nat", "-A", "PREROUTING", "-m", "addrtype", "--dst-type", "LOCAL", "-j", "DOCKER")
        ipt("-t", "nat", "-A", "POSTROUTING", "-s", "172.18.0.0/16", "!", "-o", "br-2dac3ae1b1cd", "-j", "MASQUERADE")
        ipt("-t", "nat", "-A", "DOCKER", "-d", "127.0.0.1/32", "!", "-i", "br-2dac3ae1b1cd", "-p", "tcp", "--dport", "43531",
            "-j", "DNAT", "--to-destination", "172.18.0.4:6443")
        forward.write_text("1")
        ipt("-A", "FORWARD", "-i", "eth9", "-j", "ACCEPT")  # someone else's, added meanwhile
        out["while_running"] = len(fw.save("filter")) - len(before["filter"])
        out["stopped"] = dockerd.stop_engine(timeout=5)
        sleeper.wait(timeout=10)
        out["filter_added"] = sorted(set(fw.save("filter")) - set(before["filter"]))
        out["filter_removed"] = sorted(set(before["filter"]) - set(fw.save("filter")))
        out["nat_changed"] = sorted(set(fw.save("nat")) ^ set(before["nat"]))
        out["forward"] = forward.read_text().strip()
        out["marker"] = dockerd.firewall_marker().exists()
    """)
    assert out["while_running"] > 5 and out["stopped"] is True, out
    assert out["filter_added"] == ["-A FORWARD -i eth9 -j ACCEPT"], out  # only someone else's rule stays
    assert out["filter_removed"] == [] and out["nat_changed"] == [], out
    assert out["forward"] == "0" and out["marker"] is False, out


def test_only_dockers_chains_and_rules_naming_them_or_its_bridges_are_taken_back() -> None:
    from testbed.host.docker.firewall import dockers

    before = [":FORWARD ACCEPT [0:0]", ":DOCKER - [0:0]", "-A FORWARD -j DOCKER", "-A DOCKER -o br-000000000001 -j ACCEPT"]
    after = [":FORWARD DROP [5:300]", ":DOCKER - [0:0]", ":DOCKER-USER - [0:0]", "-A FORWARD -j DOCKER", "-A FORWARD -j DOCKER-USER",
             "-A FORWARD -o docker0 -m conntrack --ctstate RELATED,ESTABLISHED -j ACCEPT", "-A FORWARD -i eth0 -j ACCEPT",
             '-A FORWARD -o br-0123456789ab -m comment --comment "a b" -j ACCEPT', "-A DOCKER -o br-000000000001 -j ACCEPT",
             "-A DOCKER-USER -j RETURN", "-A FORWARD -o br-x -j ACCEPT"]
    rules, chains = dockers(before, after)
    assert chains == ["DOCKER-USER"]  # DOCKER was there before: another engine's
    assert rules == [["-D", "FORWARD", "-o", "br-0123456789ab", "-m", "comment", "--comment", "a b", "-j", "ACCEPT"],
                     ["-D", "FORWARD", "-o", "docker0", "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT"],
                     ["-D", "FORWARD", "-j", "DOCKER-USER"]]
