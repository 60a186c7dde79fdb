"""`python -m fake_gpus.driver.kubeletplugin`: run the kubelet plugin until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path
from typing import Mapping

from fake_gpus.driver.faults import UnknownFaultError, active_faults
from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.kubeletplugin import MIG_DYNAMIC, MIG_STATIC
from fake_gpus.driver.kubeletplugin.server import KubeletPlugin, PluginConfig, log
from fake_gpus.node import SHARES, SHARES_LABEL, ModeError, parse_shares
from hostenv.versions import DEFAULT_MINOR


def parse_args(argv: list[str] | None, environ: Mapping[str, str] | None = None) -> PluginConfig:
    """The plugin's configuration from its command line and environment (`environ`: a hosted node's own,
    else this process's): the driver name and fault switches come from the environment."""
    driver = current_identity(environ).driver
    p = argparse.ArgumentParser(prog="python -m fake_gpus.driver.kubeletplugin", description="DRA kubelet plugin for (fake) NVIDIA GPUs")
    p.add_argument("--node-name", required=True, help="this node's name")
    p.add_argument("--state-dir", type=Path, help="fake NVML state directory of this node (omit on a real node)")
    p.add_argument("--nvml-lib-dir", type=Path, help="directory holding libnvidia-ml.so.1 (default: the loader's search path)")
    p.add_argument("--plugin-dir", type=Path, default=Path(f"/var/lib/kubelet/plugins/{driver}"), help="where dra.sock and the checkpoint live")
    p.add_argument("--registry-dir", type=Path, default=Path("/var/lib/kubelet/plugins_registry"), help="the kubelet's plugin registry")
    p.add_argument("--cdi-dir", type=Path, default=Path("/var/run/cdi"), help="where CDI specs are written")
    p.add_argument("--kubeconfig", default="in-cluster", help="kubeconfig path, or in-cluster (default)")
    p.add_argument("--pool-name", help="the ResourceSlice pool of this node (default: the node name)")
    p.add_argument("--host-state-dir", type=Path, help="the state directory's path on the node, if the plugin sees it elsewhere")
    p.add_argument("--host-nvml-lib-dir", type=Path, help="the library directory's path on the node, if the plugin sees it elsewhere")
    p.add_argument("--mig", choices=(MIG_DYNAMIC, MIG_STATIC), default=MIG_DYNAMIC,
                   help="dynamic: create an allocated MIG device at its placement; static: it must exist")
    p.add_argument("--k8s", default=DEFAULT_MINOR, help="Kubernetes minor whose kubelet API stubs to use")
    p.add_argument("--health-interval", type=float, default=10.0, help="seconds between device-list checks of the health stream")
    p.add_argument("--ready-port", type=int, help="serve GET /readyz on this TCP port (the DaemonSet's readiness probe)")
    p.add_argument("--consumable-shares", type=_shares, metavar="|".join(SHARES),
                   help="let several claims share a device, as NVIDIA's flag of that name (default: the node's "
                        f"{SHARES_LABEL} label, else disabled)")
    p.add_argument("--namespace", default=os.environ.get("POD_NAMESPACE", "default"),
                   help="namespace of MPS control daemons' Deployments (default: $POD_NAMESPACE, else default)")
    a = p.parse_args(argv)
    try:
        faults = active_faults(environ)
    except UnknownFaultError as exc:
        p.error(str(exc))
    return PluginConfig(node_name=a.node_name, driver=driver, plugin_dir=a.plugin_dir, registry_dir=a.registry_dir, cdi_dir=a.cdi_dir,
                        kubeconfig=a.kubeconfig, state_dir=a.state_dir, nvml_lib_dir=a.nvml_lib_dir, pool_name=a.pool_name,
                        host_state_dir=a.host_state_dir, host_lib_dir=a.host_nvml_lib_dir, mig_mode=a.mig, k8s=a.k8s,
                        faults=faults, health_interval=a.health_interval, ready_port=a.ready_port,
                        shares=a.consumable_shares or None, shares_set=a.consumable_shares is not None, namespace=a.namespace)


def _shares(text: str) -> str:
    """A --consumable-shares value ("" for disabled); one line naming the valid ones otherwise."""
    try:
        return parse_shares(text) or ""
    except ModeError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from exc


def main(argv: list[str] | None = None) -> int:
    config = parse_args(argv)
    if config.state_dir is not None and not config.state_dir.is_dir():
        # checked here for a clear message; the library itself validates the contents at nvmlInit
        print(f"error: --state-dir {config.state_dir}: no such directory", file=sys.stderr)
        return 2
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    plugin = KubeletPlugin(config)
    try:
        plugin.start()
    except Exception as exc:  # noqa: BLE001 - one line for the pod log, not a traceback
        print(f"error: kubelet plugin failed to start: {type(exc).__name__}: {exc}", file=sys.stderr)
        plugin.stop()
        return 1
    try:
        stop.wait()
        log("signal received: stopping")
    finally:
        plugin.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
