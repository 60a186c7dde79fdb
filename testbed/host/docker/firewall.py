"""The firewall rules and IPv4 forwarding our dockerd turns on: noted before it starts, taken back once it stops.

dockerd adds filter chains (DOCKER, DOCKER-USER, DOCKER-ISOLATION-STAGE-1/2) with FORWARD rules jumping into
them, a nat chain DOCKER with PREROUTING and OUTPUT jumps, MASQUERADE for its bridges' subnets, and sets
net.ipv4.ip_forward to 1; stopped, it leaves all of it. What goes is only what was not there before it started
and is of Docker's making (its chains, rules naming them or its bridges): rules anyone else added stay.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from pathlib import Path

from testbed.host import progress

TABLES = ("filter", "nat")
FORWARD_SYSCTL = Path("/proc/sys/net/ipv4/ip_forward")
BRIDGE_NAME = re.compile(r"docker0|br-[0-9a-f]{12}")  # the default bridge, a user-defined network's bridge


def save(table: str) -> list[str] | None:
    """`iptables-save -t table` as lines (rules and chain declarations), or None without iptables or its permission."""
    if not shutil.which("iptables-save"):
        return None
    done = subprocess.run(["iptables-save", "-t", table], capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return None
    return [line for line in done.stdout.splitlines() if line.startswith(("-A ", ":"))]


def state() -> dict:
    """The rules of TABLES and the forwarding switch, as now."""
    try:
        forwarding = FORWARD_SYSCTL.read_text().strip()
    except OSError:
        forwarding = None
    return {"tables": {t: save(t) for t in TABLES}, "ip_forward": forwarding}


def remember(marker: Path) -> None:
    """Write the state before our dockerd starts to `marker`, unless one is there: a dockerd of ours that died
    without being stopped left it, and the state before that one is the one to go back to."""
    if not marker.exists():
        marker.write_text(json.dumps(state()) + "\n")


def _chain(line: str) -> str:
    return line[1:].split(" ", 1)[0]


def dockers(before: list[str], after: list[str]) -> tuple[list[list[str]], list[str]]:
    """What `after` has of Docker's making that `before` lacked: rules (as iptables arguments that delete them,
    last added first) and chains (to flush and delete, after the rules)."""
    had = set(before)
    had_chains = {_chain(line) for line in before if line.startswith(":")}  # by name: a built-in's counters change
    chains = [c for c in (_chain(line) for line in after if line.startswith(":")) if c not in had_chains and c.startswith("DOCKER")]
    rules = []
    for line in after:
        if not line.startswith("-A ") or line in had:
            continue
        words = shlex.split(line)
        if words[1] in chains:
            continue  # goes with its chain
        if _of_docker(words):
            rules.append(["-D", *words[1:]])
    return rules[::-1], chains


def _of_docker(words: list[str]) -> bool:
    """A rule jumping to a DOCKER chain or naming one of dockerd's bridges as its in- or out-interface."""
    for flag, value in zip(words, words[1:]):
        if flag in ("-j", "-g") and value.startswith("DOCKER"):
            return True
        if flag in ("-i", "-o") and BRIDGE_NAME.fullmatch(value):
            return True
    return False


def take_back(marker: Path) -> list[str]:
    """Remove what our dockerd added since `remember(marker)` and switch forwarding back; returns what could not
    be removed (each as the command that failed). The marker goes."""
    if not marker.exists():
        return []
    before = json.loads(marker.read_text())
    marker.unlink()
    failed = []
    now = state()
    for table in TABLES:
        old, new = before["tables"].get(table), now["tables"].get(table)
        if old is None or new is None:
            continue
        rules, chains = dockers(old, new)
        commands = [["-t", table, *r] for r in rules]
        commands += [["-t", table, "-F", c] for c in chains] + [["-t", table, "-X", c] for c in chains]
        for args in commands:
            done = subprocess.run(["iptables", *args], capture_output=True, text=True, check=False)
            if done.returncode != 0:
                failed.append(shlex.join(["iptables", *args]) + f": {done.stderr.strip()}")
    if before.get("ip_forward") == "0" and now.get("ip_forward") == "1":
        try:
            FORWARD_SYSCTL.write_text("0\n")
        except OSError as exc:
            failed.append(f"ip_forward back to 0: {exc}")
    for line in failed:
        progress.note(f"could not take back what our dockerd added to the firewall: {line}")
    return failed
