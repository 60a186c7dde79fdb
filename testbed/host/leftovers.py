"""What a run may leave behind on this machine: processes, listening ports, mounts, network namespaces,
containers and files. `scan(marker)` finds what refers to one run's directory; `snapshot()` and `diff()`
compare the whole machine before and after.

Read from /proc (and `docker ps` when an engine answers), so it sees what was really left, not what a
pid file claims.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hostenv.dirs import cache_root, state_root
from hostenv.mounts import mount_points, mounted_below
from testbed.host.netns import NETNS_DIR, netns_dir_idle

# processes a test bed starts; a snapshot names those left running
COMPONENTS = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok-controller", "kwokctl",
              "kubelet", "dockerd", "containerd", "containerd-shim", "kind", "debootstrap")
# and every `python -m` module of these packages: our plugins, the publisher, the stand-in kubelet (a module of a
# layer above this one, so matched by its package, not named)
PYTHON_PACKAGES = ("fake_gpus", "testbed")


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def processes() -> dict[int, str]:
    """pid -> command line of every process (kernel threads, which have none, left out)."""
    found = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            line = _cmdline(int(entry.name))
            if line:
                found[int(entry.name)] = line
    return found


def listening_ports() -> set[int]:
    """TCP ports in LISTEN state (IPv4 and IPv6), from /proc/net/tcp{,6}."""
    return {port for port, _ in listeners()}


def listeners() -> set[tuple[int, str]]:
    """(port, local address) of every TCP socket in LISTEN state; addresses as dotted IPv4 or IPv6 hex."""
    return {(port, address) for port, address, _ in _listening_sockets()}


def _listening_sockets(net: str = "/proc/net") -> list[tuple[int, str, str]]:
    """(port, local address, socket inode) of every listening TCP socket in the network namespace of `net`."""
    found = []
    for name in ("tcp", "tcp6"):
        try:
            lines = Path(f"{net}/{name}").read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == "0A":  # TCP_LISTEN
                address, port = fields[1].rsplit(":", 1)
                found.append((int(port, 16), _address(address), fields[9]))
    return found


def listeners_of(pids: list[int]) -> list[tuple[int, str, int]]:
    """(pid, local address, port) of every TCP socket these processes listen on, in their own network namespace."""
    found = []
    for pid in pids:
        try:
            inodes = {os.readlink(fd).removeprefix("socket:[").rstrip("]") for fd in Path(f"/proc/{pid}/fd").iterdir()
                      if os.readlink(fd).startswith("socket:")}
        except OSError:
            continue
        found += [(pid, address, port) for port, address, inode in _listening_sockets(f"/proc/{pid}/net") if inode in inodes]
    return sorted(found)


def is_loopback(address: str) -> bool:
    """127.0.0.0/8 or ::1 (IPv6 addresses as /proc writes them, IPv4-mapped loopback included)."""
    if "." in address:
        return address.startswith("127.")
    return address in ("00000000000000000000000001000000", "0000000000000000FFFF00000100007F")


def _address(hex_address: str) -> str:
    if len(hex_address) == 8:  # IPv4, little-endian
        return ".".join(str(int(hex_address[i:i + 2], 16)) for i in (6, 4, 2, 0))
    return hex_address


def stale_mounts() -> list[str]:
    """Mounts of ours that nothing uses any more: anything under the cache, such as a stopped dockerd's data
    root (it bind-mounts it onto itself) and its exec root, /run/netns with no namespace left in it (`ip netns add` mounts it and `del`
    leaves it), and anything mounted under the clusters' state (kind and KWOK homes, kwokctl's workdir)."""
    from testbed.host.docker.dockerd import engine_mounts, started_pid  # the engine's own layout

    engine = engine_mounts()
    in_use = set(engine) if started_pid() is not None or _foreign_dockerd_on(engine) else set()
    found = [m for m in mounted_below(cache_root()) + engine if m not in in_use]
    if netns_dir_idle():
        found.append(str(NETNS_DIR))
    found += mounted_below(state_root())
    return sorted(set(found))


def _foreign_dockerd_on(points: list[str]) -> bool:
    """Whether a dockerd we did not record (another run's pid file, a restart by hand) runs with our config."""
    config = str(cache_root() / "docker" / "daemon.json")
    return bool(points) and any("dockerd" in line.split(" ", 1)[0] and config in line for line in processes().values())


def network_namespaces() -> list[str]:
    """Named network namespaces (`ip netns`), as files under /run/netns."""
    folder = Path("/run/netns")
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def containers() -> list[str]:
    """Names of every container of a Docker engine that answers (none when no engine runs)."""
    if not shutil.which("docker"):
        return []
    out = subprocess.run(["docker", "ps", "-a", "--format", "{{.Names}}"], capture_output=True, text=True, timeout=60)
    return sorted(out.stdout.split()) if out.returncode == 0 else []


def links() -> list[str]:
    """Names of this network namespace's interfaces (a bridge or veth a run made and left shows here)."""
    folder = Path("/sys/class/net")
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


def temp_entries() -> list[str]:
    """Names in the temporary directory that look like ours (dra-testbed*, tmp* made by tempfile)."""
    root = Path(tempfile.gettempdir())
    return sorted(p.name for p in root.iterdir() if p.name.startswith(("dra-testbed", "tmp")))


@dataclass
class Found:
    """What refers to one run's directory (`scan`) or differs between two snapshots (`diff`)."""

    processes: dict[int, str] = field(default_factory=dict)
    ports: list[int] = field(default_factory=list)
    mounts: list[str] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    containers: list[str] = field(default_factory=list)
    netns: list[str] = field(default_factory=list)
    links: list[str] = field(default_factory=list)
    temp: list[str] = field(default_factory=list)

    def __bool__(self) -> bool:
        return any(asdict(self).values())

    def summary(self) -> str:
        """One line per kind of leftover, for an assertion message or a report."""
        return "; ".join(f"{k}: {v}" for k, v in asdict(self).items() if v) or "nothing"


def scan(marker: Path, ports: tuple[int, ...] = (), keep: tuple[str, ...] = (), stale: bool = False) -> Found:
    """Processes whose command line names `marker`, `ports` still listened on by such a process (or by one
    whose command line cannot be read), mounts under it, and files under it other than the names in `keep`
    (lock files and the like, which a later run reuses); with `stale`, also every stale mount of ours
    (`stale_mounts`: those outside `marker` that a run left, e.g. a stopped dockerd's)."""
    text = str(marker)
    files = []
    if marker.exists():
        files = sorted(str(p.relative_to(marker)) for p in marker.rglob("*")
                       if not p.is_dir() and p.name not in keep)
    ours = {pid: line for pid, line in processes().items() if text in line and pid != os.getpid()}
    # a port is ours while a process of this run holds it; on a shared machine another run may take it next
    held = {port for pid, _, port in listeners_of(list(processes()))
            if port in ports and (pid in ours or not _cmdline(pid))} if ports else set()  # reading every process's sockets is slow
    return Found(
        processes=ours,
        ports=sorted(held),
        mounts=sorted(set(mounted_below(marker)) | set(stale_mounts() if stale else [])),
        files=files,
    )


def snapshot() -> dict:
    """The machine's test-bed-relevant state: component processes, listening ports, mounts, netns, links, containers,
    temp."""
    return {
        "processes": {str(pid): line for pid, line in processes().items()
                      if any(c in line.split(" ", 1)[0] for c in COMPONENTS)
                      or any(f"-m {package}." in line for package in PYTHON_PACKAGES)},
        "ports": sorted(listening_ports()),
        "mounts": mount_points(),
        "stale_mounts": stale_mounts(),
        "netns": network_namespaces(),
        "links": links(),
        "containers": containers(),
        "temp": temp_entries(),
    }


def diff(before: dict, after: dict) -> Found:
    """What `after` holds that `before` did not."""
    return Found(
        processes={int(pid): line for pid, line in after["processes"].items() if pid not in before["processes"]},
        ports=sorted(set(after["ports"]) - set(before["ports"])),
        mounts=sorted((set(after["mounts"]) - set(before["mounts"])) |
                      (set(after.get("stale_mounts", [])) - set(before.get("stale_mounts", [])))),
        containers=sorted(set(after["containers"]) - set(before["containers"])),
        netns=sorted(set(after["netns"]) - set(before["netns"])),
        links=sorted(set(after.get("links", [])) - set(before.get("links", []))),
        temp=sorted(set(after["temp"]) - set(before["temp"])),
    )
