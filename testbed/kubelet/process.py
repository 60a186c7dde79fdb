"""The stand-in kubelet as a background process of a KWOK cluster: started with the driver, stopped by `down`.

A node's plugin either runs already (NVIDIA's, which also publishes) or is started by the stand-in
when the first pod holding claims is bound to that node (`OnDemand`: ours, whose slices come from the
publisher), so a large fleet runs no plugin it does not use. On-demand plugins are files in
<home>/standin-plugins, read by the running stand-in every round, as a DaemonSet's pods follow the
nodes: a node that joins gets its file (`add_plugin`), one that leaves loses it (`remove_plugin`), and a
rewritten file (a node's mode switched) has that node's plugin stopped and started anew from it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

from hostenv.processes import alive, interrupts_held, terminate

KUBELET_PID, KUBELET_LOG = "standin-kubelet.pid", "standin-kubelet.log"
ON_DEMAND_DIR = "standin-plugins"  # <home>/standin-plugins/<node>.json (how to start it) and <node>.pid
HOSTS_DIR = "hosts"  # <home>/standin-plugins/hosts/<host>.pid and <host>/: plugin hosts (testbed.kubelet.plugin_host)
_REPO = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class OnDemand:
    """How to start one node's plugin: its command line, added environment and log file."""

    argv: list[str]
    log: str
    env: dict[str, str] = field(default_factory=dict)
    registry: str = ""  # the plugin's registration directory (the kubelet's plugins_registry of that node)
    host: str = ""  # the plugin host serving this node (testbed.kubelet.plugin_host); "": a process of its own

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(asdict(self), indent=1) + "\n")

    @classmethod
    def read(cls, path: Path) -> OnDemand:
        data = json.loads(path.read_text())
        return cls(list(data["argv"]), data["log"], dict(data.get("env") or {}), str(data.get("registry") or ""),
                   str(data.get("host") or ""))

    def start(self, pid_file: Path) -> subprocess.Popen:
        """Start it in a session of its own (the stand-in stops it; `down` stops it if the stand-in died)."""
        env = {**os.environ, **self.env}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
        with open(self.log, "ab") as log, interrupts_held():  # recorded before an interrupt can stop its caller
            proc = subprocess.Popen(self.argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                    env=env, start_new_session=True)
            pid_file.write_text(f"{proc.pid}\n")
        return proc


def plugin_file(home: Path, node: str) -> Path:
    """Where the stand-in of `home` reads how to start `node`'s plugin."""
    return Path(home) / ON_DEMAND_DIR / f"{node}.json"


def add_plugin(home: Path, node: str, how: OnDemand) -> None:
    """Give `node` its on-demand plugin (or replace how it starts: the running one is stopped for it)."""
    if not how.registry:
        raise ValueError(f"node {node}: an on-demand plugin needs its registry directory")
    path = plugin_file(home, node)
    partial = path.with_suffix(".partial")  # the stand-in must never read half a file
    how.write(partial)
    partial.replace(path)


def plugin_pid(home: Path, node: str) -> int | None:
    """The pid of `node`'s on-demand plugin while one runs (the stand-in writes it beside the node's file)."""
    try:
        pid = int(plugin_file(home, node).with_suffix(".pid").read_text())
    except (OSError, ValueError):
        return None
    return pid if alive(pid) else None


def remove_plugin(home: Path, node: str) -> None:
    """`node` left: the stand-in stops its plugin and forgets the node."""
    plugin_file(home, node).unlink(missing_ok=True)


def start(home: Path, kubeconfig: Path, driver: str, nodes: dict[str, Path],
          on_demand: dict[str, OnDemand] | None = None) -> int:
    """Start `python -m testbed.kubelet` for `nodes` (node -> plugin registry dir) and the on-demand plugins
    of <home>/standin-plugins (`on_demand` written there first); returns its pid."""
    argv = [sys.executable, "-m", "testbed.kubelet", "--kubeconfig", str(kubeconfig), "--driver", driver]
    for node, registry in nodes.items():
        argv += ["--node", f"{node}={registry}"]
    for node, how in (on_demand or {}).items():
        add_plugin(home, node, how)
    if on_demand is not None:
        argv += ["--plugins-dir", str(Path(home) / ON_DEMAND_DIR)]
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
    # held: a Ctrl-C between the start and the pid file would leave it running where stop() never looks
    with open(home / KUBELET_LOG, "ab") as log, interrupts_held():
        proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
        (home / KUBELET_PID).write_text(f"{proc.pid}\n")
    return proc.pid


def stop(home: Path) -> None:
    """Stop the stand-in kubelet of `home` and any plugin it started; safe when none runs."""
    home = Path(home)
    pid_files = [home / KUBELET_PID, *sorted((home / ON_DEMAND_DIR).glob("*.pid")),
                 *sorted((home / ON_DEMAND_DIR / HOSTS_DIR).glob("*.pid"))]
    for pid_file in pid_files:  # the kubelet first: it would otherwise restart a plugin stopped under it
        try:
            terminate(int(pid_file.read_text().strip()))
        except (OSError, ValueError):
            pass
        pid_file.unlink(missing_ok=True)
