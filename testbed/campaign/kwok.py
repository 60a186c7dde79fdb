"""The campaign's KWOK target: our kubelet plugin on every simulated node, and every unit supervised.

KWOK nodes have no kubelet, so the campaign adds what a node would run: one process of our kubelet
plugin per node (on the node's fake NVML state, with its own checkpoint, sockets and CDI directory)
and the stand-in kubelet (python -m testbed.kubelet) that prepares the claims of bound pods. The
supervised units are these plugins, the publisher, and kwokctl's etcd, kube-apiserver and
kube-scheduler (adopted from their pid files); the stand-in kubelet is supervised too but never killed.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fake_gpus.driver.kubeletplugin.server import CHECKPOINT
from fake_gpus.nvml.build import ensure_library
from hostenv.processes import terminate
from testbed.campaign.audit import NodeState, cdi_uids, read_checkpoint, read_instances
from testbed.campaign.supervisor import SuperviseError, Unit
from testbed.clusters.layout import Layout
from testbed.kubelet.daemon import PREPARED_ANNOTATION

_REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT = 180.0
# component kind -> kwokctl's name for its process
CONTROL_PLANE = {"etcd": "etcd", "apiserver": "kube-apiserver", "scheduler": "kube-scheduler"}


class KwokTarget:
    """The nodes' plugins and the stand-in kubelet on a running KWOK cluster (`home`, `kwok_dir`)."""

    def __init__(self, home: Path, kwok_dir: Path, layout: Layout, driver: str, env: dict[str, str]) -> None:
        self.home, self.kwok_dir, self.layout, self.driver, self.env = home, kwok_dir, layout, driver, env
        self.root = home / "campaign"
        digest = hashlib.sha256(str(home.resolve()).encode()).hexdigest()[:12]
        self.sockets = Path(tempfile.gettempdir()) / "dra-testbed-campaign" / digest  # unix socket paths are short

    # --- per node paths ---

    def plugin_dir(self, node: str) -> Path:
        return self.sockets / node / "plugins" / self.driver

    def registry_dir(self, node: str) -> Path:
        return self.sockets / node / "registry"

    def cdi_dir(self, node: str) -> Path:
        return self.root / node / "cdi"

    def state_dir(self, node: str) -> Path:
        return self.home / "nvml" / node

    # --- life cycle ---

    def _environment(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if k not in ("NVIDIA_VISIBLE_DEVICES", "FAKE_NVML_STATE_DIR", "DRA_TESTBED_FAULTS")}
        env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_REPO), env.get("PYTHONPATH", "")) if p)
        return {**env, **self.env}

    def _spawn(self, name: str, argv: list[str]) -> Path:
        (self.root / name).parent.mkdir(parents=True, exist_ok=True)
        with open(self.root / f"{name}.log", "ab") as log:
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=self._environment(),
                                    start_new_session=True)
        pid_file = self.root / f"{name}.pid"
        pid_file.write_text(f"{proc.pid}\n")
        return pid_file

    def start(self) -> list[Unit]:
        """Start every node's plugin and the stand-in kubelet; return every unit to supervise."""
        lib = ensure_library()
        units = []
        for node in self.layout.nodes:
            mig = "static" if node.mode.kind == "static-mig" else "dynamic"
            argv = [sys.executable, "-m", "fake_gpus.driver.kubeletplugin", "--node-name", node.name,
                    "--state-dir", str(self.state_dir(node.name)), "--nvml-lib-dir", str(lib),
                    "--plugin-dir", str(self.plugin_dir(node.name)), "--registry-dir", str(self.registry_dir(node.name)),
                    "--cdi-dir", str(self.cdi_dir(node.name)), "--kubeconfig", str(self.home / "kubeconfig"), "--mig", mig]
            units.append((f"plugin/{node.name}", "plugin", self._spawn(f"plugin-{node.name}", argv)))
        self._wait(lambda: all((self.registry_dir(n.name) / f"{self.driver}-reg.sock").exists() for n in self.layout.nodes),
                   "every node's plugin serving")
        argv = [sys.executable, "-m", "testbed.kubelet", "--kubeconfig", str(self.home / "kubeconfig"), "--driver", self.driver]
        for node in self.layout.nodes:
            argv += ["--node", f"{node.name}={self.registry_dir(node.name)}"]
        units.append(("standin-kubelet", "kubelet", self._spawn("standin-kubelet", argv)))
        units.append(("publisher", "publisher", self.home / "publisher.pid"))
        for kind, name in CONTROL_PLANE.items():
            units.append((name, kind, self.kwok_dir / "pids" / f"{name}.pid"))
        adopted = [Unit.adopt(name, kind, pid_file) for name, kind, pid_file in units]  # Popen returns once exec'd
        return adopted

    def _wait(self, done, what: str) -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not done():
            if time.monotonic() > deadline:
                raise SuperviseError(f"timed out after {START_TIMEOUT:.0f}s waiting for {what} (logs in {self.root})")
            time.sleep(0.2)

    def stop(self) -> None:
        """Stop the plugins and the stand-in kubelet (the cluster's teardown stops the rest)."""
        for pid_file in self.root.glob("*.pid"):
            try:
                terminate(int(pid_file.read_text().strip()))
            except (OSError, ValueError):
                pass
            pid_file.unlink(missing_ok=True)
        shutil.rmtree(self.sockets, ignore_errors=True)

    # --- observation ---

    def prepared(self, pod) -> bool:
        """The stand-in kubelet marks a pod once NodePrepareResources succeeded for its claims."""
        return (pod.metadata.annotations or {}).get(PREPARED_ANNOTATION) == "true"

    def node_states(self) -> list[NodeState]:
        states = []
        for node in self.layout.nodes:
            cdi = self.cdi_dir(node.name)
            names = [p.name for p in cdi.iterdir()] if cdi.is_dir() else []
            states.append(NodeState(node.name, node.mode.kind == "dynamic-mig", read_instances(self.state_dir(node.name)),
                                    read_checkpoint(self.plugin_dir(node.name) / CHECKPOINT), cdi_uids(names)))
        return states
