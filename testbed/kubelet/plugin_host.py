"""The stand-in kubelet's side of plugin hosts: many nodes' on-demand plugins served by one process.

A node whose OnDemand names a `host` gets no plugin process of its own: when its first claim-holding pod
arrives, the stand-in starts that host (python -m fake_gpus.driver.kubeletplugin.multinode, unless it runs)
and hands it the node by writing <home>/standin-plugins/hosts/<host>/<node>.json (the node's plugin
arguments and environment); a node that leaves, or whose file is rewritten, has that file removed (the host
stops serving it) before anything else happens. The stand-in supervises the host as it does a node's
plugin: a host that exits is started again at once and serves every node handed to it. What the stand-in
talks to is unchanged: each node's own registration and DRA sockets, checkpoint, CDI and NVML state.
Why a host: a plugin process costs about 72 MiB, a node served by a host a small fraction of that
(benchmarks/plugin_memory.py), so prepare can run on fleets of a thousand nodes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Mapping

from hostenv.processes import alive, terminate
from testbed.kubelet.process import HOSTS_DIR, ON_DEMAND_DIR, OnDemand, plugin_file

PLUGIN_MODULE = "fake_gpus.driver.kubeletplugin"  # a node's own plugin: its arguments are what a host takes
HOST_MODULE = "fake_gpus.driver.kubeletplugin.multinode"
SERVING, FAILED = ".serving", ".failed"  # written by the host beside a node's file
STOP_WAIT = 30.0  # seconds a node's stop waits for its host to have stopped serving it

HOSTING_ENV = "DRA_TESTBED_PLUGIN_HOST"  # per-node | host | auto (default)
HOSTING_MODES = ("per-node", "host", "auto")
AUTO_FROM_NODES = 50  # auto: fleets of this many nodes get hosts, smaller ones a process per node
NODES_PER_HOST = 500  # one host per this many nodes (a host serves its calls on one core)


def hosts_for(nodes: int, environ: Mapping[str, str] | None = None) -> int:
    """How many plugin hosts a fleet of `nodes` gets (0: a plugin process per node), as $DRA_TESTBED_PLUGIN_HOST
    says; ValueError naming the valid values for another."""
    mode = (os.environ if environ is None else environ).get(HOSTING_ENV, "") or "auto"
    if mode not in HOSTING_MODES:
        raise ValueError(f"${HOSTING_ENV}={mode!r}: expected one of {', '.join(HOSTING_MODES)}")
    if mode == "per-node" or (mode == "auto" and nodes < AUTO_FROM_NODES):
        return 0
    return max(1, -(-nodes // NODES_PER_HOST))


def host_of(node: str, hosts: int) -> str:
    """The host serving `node` among `hosts` ("" for none): stable for a node, whatever else joins."""
    return f"h{zlib.crc32(node.encode()) % hosts}" if hosts > 0 else ""


def plugin_args(how: OnDemand) -> list[str]:
    """A hosted node's plugin arguments: its OnDemand's command line after `python -m PLUGIN_MODULE`."""
    if how.argv[1:3] != ["-m", PLUGIN_MODULE]:
        raise ValueError(f"a hosted node's plugin must be `python -m {PLUGIN_MODULE} ...`, not {how.argv[:3]}")
    return how.argv[3:]


def hosts_dir(plugins_dir: Path) -> Path:
    return Path(plugins_dir) / HOSTS_DIR


def served_generation(home: Path, node: str, host: str) -> str | None:
    """The generation of `node`'s file its host serves now (None: not served), as the host wrote it."""
    try:
        return (hosts_dir(Path(home) / ON_DEMAND_DIR) / host / f"{node}{SERVING}").read_text().strip()
    except OSError:
        return None


def generation(home: Path, node: str) -> str | None:
    """The version of `node`'s on-demand file (None: no file): what a host serving it reports back."""
    try:
        st = plugin_file(home, node).stat()
    except OSError:
        return None
    return f"{st.st_ino}:{st.st_mtime_ns}"


@dataclass
class Hosts:
    """The plugin hosts of one stand-in kubelet, by name; each started when a node of its first needs it."""

    plugins_dir: Path
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    since: dict[str, float] = field(default_factory=dict)

    def nodes_dir(self, host: str) -> Path:
        return hosts_dir(self.plugins_dir) / host

    def pid_file(self, host: str) -> Path:
        return hosts_dir(self.plugins_dir) / f"{host}.pid"

    def running(self, host: str) -> bool:
        proc = self.procs.get(host)
        return proc is not None and proc.poll() is None

    def exited(self, host: str) -> bool:
        """It was started by this stand-in and has exited since (killed): to be started again."""
        proc = self.procs.get(host)
        return proc is not None and proc.poll() is not None

    def ensure(self, host: str) -> float:
        """Start `host` unless it runs; returns when it was started (monotonic)."""
        if self.running(host):
            return self.since[host]
        if host not in self.procs:  # first start by this stand-in: a host left by an earlier one goes, with its nodes
            self._clear(host)
        nodes = self.nodes_dir(host)
        nodes.mkdir(parents=True, exist_ok=True)
        how = OnDemand([sys.executable, "-m", HOST_MODULE, "--nodes-dir", str(nodes)],
                       str(hosts_dir(self.plugins_dir) / f"{host}.log"))
        self.procs[host] = how.start(self.pid_file(host))
        self.since[host] = time.monotonic()
        return self.since[host]

    def _clear(self, host: str) -> None:
        try:
            terminate(int(self.pid_file(host).read_text()))
        except (OSError, ValueError):
            pass
        self.pid_file(host).unlink(missing_ok=True)
        for path in self.nodes_dir(host).glob("*") if self.nodes_dir(host).is_dir() else ():
            path.unlink(missing_ok=True)

    def stop_all(self) -> None:
        for host, proc in self.procs.items():
            terminate(proc.pid)
            proc.wait()
            self.pid_file(host).unlink(missing_ok=True)
        self.procs.clear()


@dataclass
class HostedStarter:
    """A node's on-demand plugin served by a host (the daemon's _Starter for a node of its own process)."""

    node: str
    how: OnDemand
    hosts: Hosts
    generation: str = ""
    grace: float = 60.0  # seconds the stand-in waits for the node to register before a failed prepare is an event
    since: float = 0.0
    handed: bool = False

    @property
    def node_file(self) -> Path:
        return self.hosts.nodes_dir(self.how.host) / f"{self.node}.json"

    def starting(self) -> bool:
        """Start the host unless it runs and hand it the node; True while within `grace` of either."""
        if not self.handed or not self.hosts.running(self.how.host):
            started = self.hosts.ensure(self.how.host)
            if not self.node_file.exists():
                partial = self.node_file.with_suffix(".partial")  # the host must never read half a file
                partial.write_text(json.dumps({"args": plugin_args(self.how), "env": self.how.env,
                                               "generation": self.generation}) + "\n")
                partial.replace(self.node_file)
            self.handed = True
            self.since = max(started, time.monotonic())
        return time.monotonic() - self.since < self.grace

    def running(self) -> bool:
        return self.handed and self.hosts.running(self.how.host)

    def exited(self) -> bool:
        return self.handed and self.hosts.exited(self.how.host)

    def stop(self) -> None:
        """The host stops serving the node (its sockets gone) before this returns, as a stopped process would."""
        if not self.handed:
            return
        self.node_file.unlink(missing_ok=True)
        serving = self.node_file.with_suffix(SERVING)
        deadline = time.monotonic() + STOP_WAIT
        while serving.exists() and self.hosts.running(self.how.host) and time.monotonic() < deadline:
            time.sleep(0.05)
        self.handed = False
