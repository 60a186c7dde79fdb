"""The fresh machine's own network: a network namespace joined to the host by a veth pair and NATed out.

Why: the README's test command starts a dockerd and kind networks. In the host's namespace they would
share iptables chains, the docker0 bridge and kind's subnet with any dockerd a colleague or CI job runs
there; in a namespace of its own the fresh machine is a machine of its own, as a container would be.
Everything made here (namespace, veth, the three iptables rules, forwarding turned on) is undone on exit, also on
failure.
"""

from __future__ import annotations

import ipaddress
import os
import subprocess
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

from hostenv.mounts import mount_points

SUBNET = ipaddress.ip_network("10.250.213.0/30")  # a /30 no one here routes; checked before use
NETNS_DIR = Path("/run/netns")  # where `ip netns` names namespaces
FORWARDING = Path("/proc/sys/net/ipv4/ip_forward")  # the host's (this network namespace's)


def _run(*args: str) -> None:
    subprocess.run(args, check=True, capture_output=True, text=True)


def _quiet(*args: str) -> None:
    subprocess.run(args, capture_output=True)


def _rules(host_if: str) -> list[tuple[str, ...]]:
    """The iptables rules (table, chain, match...) that let the namespace reach the registries."""
    return [("nat", "POSTROUTING", "-s", str(SUBNET), "!", "-o", host_if, "-j", "MASQUERADE"),
            ("filter", "FORWARD", "-i", host_if, "-j", "ACCEPT"),
            ("filter", "FORWARD", "-o", host_if, "-m", "conntrack", "--ctstate", "RELATED,ESTABLISHED", "-j", "ACCEPT")]


def leftovers(tag: str | None = None) -> list[str]:
    """What of the network of run `tag` is still there (namespace, veth, iptables rules); [] when nothing."""
    tag = tag or str(os.getpid())
    name, host_if = f"dra-fresh-{tag}", f"dfh{tag}"[:15]
    left = [f"netns {name}"] if (NETNS_DIR / name).exists() else []
    left += [f"link {host_if}"] if Path(f"/sys/class/net/{host_if}").exists() else []
    for table, chain, *match in _rules(host_if):
        if subprocess.run(["iptables", "-t", table, "-C", chain, *match], capture_output=True).returncode == 0:
            left.append(f"iptables -t {table} {chain} {' '.join(match)}")
    return left


def _dockerd_here() -> bool:
    """Whether a dockerd runs in this network namespace (it turns forwarding on at its start and relies on it)."""
    own = os.readlink("/proc/self/ns/net")
    for proc in Path("/proc").iterdir():
        try:
            if proc.name.isdigit() and (proc / "comm").read_text().strip() == "dockerd" and os.readlink(proc / "ns" / "net") == own:
                return True
        except OSError:
            continue
    return False


@contextmanager
def forwarding(flag: Path = FORWARDING) -> Iterator[None]:
    """IPv4 forwarding on while the block runs: a new machine has it off (a dockerd turns it on, which is why only
    a machine that never ran one showed this), and without it the namespace reaches no registry. Turned off again
    afterwards when it was off before, unless a dockerd started meanwhile and now relies on it."""
    was_on = flag.read_text().strip() == "1"
    if not was_on:
        flag.write_text("1\n")
    try:
        yield
    finally:
        if not was_on and not _dockerd_here():
            flag.write_text("0\n")


@contextmanager
def private_network(tag: str | None = None) -> Iterator[list[str]]:
    """A namespace with a default route through the host; yields the command prefix that runs in it."""
    tag = tag or str(os.getpid())
    name, host_if, inner_if = f"dra-fresh-{tag}", f"dfh{tag}"[:15], f"dfn{tag}"[:15]
    routes = subprocess.run(["ip", "-4", "route", "show", "to", "match", str(SUBNET[1])], capture_output=True, text=True).stdout
    if any(line.split()[0] == str(SUBNET) for line in routes.splitlines() if line.strip()):
        raise RuntimeError(f"{SUBNET} is already routed on this host (another fresh run?); stop it first")
    host_ip, inner_ip = f"{SUBNET[1]}/{SUBNET.prefixlen}", f"{SUBNET[2]}/{SUBNET.prefixlen}"
    inside = ["ip", "netns", "exec", name]
    added: list[tuple[str, ...]] = []
    netns_was_mounted = str(NETNS_DIR) in mount_points()
    try:
        _run("ip", "netns", "add", name)
        _run("ip", "link", "add", host_if, "type", "veth", "peer", "name", inner_if, "netns", name)
        _run("ip", "addr", "add", host_ip, "dev", host_if)
        _run("ip", "link", "set", host_if, "up")
        _run(*inside, "ip", "link", "set", "lo", "up")
        _run(*inside, "ip", "addr", "add", inner_ip, "dev", inner_if)
        _run(*inside, "ip", "link", "set", inner_if, "up")
        _run(*inside, "ip", "route", "add", "default", "via", str(SUBNET[1]))
        for table, chain, *match in _rules(host_if):
            _run("iptables", "-t", table, "-I", chain, "1", *match)  # first: before any FORWARD DROP of a dockerd
            added.append((table, chain, *match))
        with forwarding():
            yield ["nsenter", f"--net=/run/netns/{name}"]
    finally:
        for table, chain, *match in added:
            _quiet("iptables", "-t", table, "-D", chain, *match)
        _quiet("ip", "link", "del", host_if)
        _quiet("ip", "netns", "del", name)
        release_netns_dir(netns_was_mounted)


def netns_dir_idle() -> bool:
    """Whether /run/netns is mounted with no namespace of anyone's left in it (what `ip netns` leaves)."""
    return str(NETNS_DIR) in mount_points() and not (NETNS_DIR.is_dir() and any(NETNS_DIR.iterdir()))


def release_netns_dir(was_mounted: bool) -> bool:
    """Unmount /run/netns when `ip netns add` mounted it for us (it bind-mounts the folder onto itself and
    `ip netns del` leaves that) and no namespace of anyone's is left in it; True when unmounted."""
    if was_mounted or not netns_dir_idle():
        return False
    while str(NETNS_DIR) in mount_points():  # `ip netns` may have stacked it twice (bind, then make-shared)
        if subprocess.run(["umount", str(NETNS_DIR)], capture_output=True).returncode != 0:
            return False
    return True
