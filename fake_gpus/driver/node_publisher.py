"""The driver DaemonSet's slice publisher: publishes THIS node's ResourceSlices from its NVML state.

On kind, every node runs its own publisher next to its kubelet plugin, with the node's own service
account token (which names the node, so the ValidatingAdmissionPolicy can hold it to its own slices).
It reuses the driver's Publisher for the NVML -> slices half only: the state directory is the node's
(mounted by the test bed), so nothing here creates hardware.

    python3 -m fake_gpus.driver.node_publisher --node-name NODE --state-dir DIR [--kubeconfig in-cluster]
"""

from __future__ import annotations

import argparse
import signal
import sys
import time
from pathlib import Path

from kubernetes import client

from fake_gpus.driver import rest
from fake_gpus.driver.faults import active_faults
from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.nvml_adapter import NvmlLibrary
from fake_gpus.driver.paging import pages
from fake_gpus.driver.kubeletplugin.claims import api_client
from fake_gpus.driver.readiness import ReadyServer
from fake_gpus.driver.publisher import POLL_SECONDS, Publisher, _state_stamp, node_config
from fake_gpus.driver.slices import api_limits, server_minor

SONAME = "libnvidia-ml.so.1"
RETRY_SECONDS = 2.0
REPAIR_SECONDS = 10.0  # how often the node's slices in the API are compared with what was published


def _repair(publisher: "NodePublisher", node: str) -> bool:
    """Republish when the node's slices in the API are not the ones published (and say so: False): the
    kubelet deletes a driver's slices some 30 s after its plugin went away (a restart of the driver's pod
    can race it), and so may anyone with the rights; nothing in NVML changed, so only this notices."""
    names = {s["metadata"]["name"] for s in pages(publisher.slices, field_selector=f"spec.nodeName={node}")
             if s["spec"]["driver"] == publisher.identity.driver}
    if names != set(publisher.published.get(node, (0, {}))[1]):
        print(f"node-publisher: the slices of {node} in the API are not the ones published; publishing again", flush=True)
        publisher.reload_published(node)
        publisher.stamps.pop(node, None)
        return False
    return True


class NodePublisher(Publisher):
    """A Publisher of one node whose state directory is given, not derived from a root."""

    def __init__(self, *args, node_state_dir: Path, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.node_state_dir = node_state_dir
        self.changes.close()  # one node: its loop compares the stamp every poll (cheap), no event queue to drain

    def state_dir(self, node: str) -> Path:
        return self.node_state_dir


class Readiness:
    """Why this publisher is not ready (None: the node's current slices are in the API), for /readyz."""

    def __init__(self) -> None:
        self.reason: str | None = "the node's slices are not published yet"

    def __call__(self) -> str | None:
        return self.reason


def run(node_name: str, state_dir: Path, nvml_lib_dir: Path, kubeconfig: str, ready: Readiness | None = None) -> int:
    ready = ready or Readiness()
    api = api_client(kubeconfig)
    limits = api_limits(server_minor(client.VersionApi(api).get_code()))
    publisher = NodePublisher(api, NvmlLibrary(nvml_lib_dir / SONAME), state_dir, None, current_identity(), active_faults(),
                              limits, node_state_dir=state_dir)
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: publisher.stop.set())
    cfg = node_config(rest.request(api, "GET", f"/api/v1/nodes/{node_name}", returns="V1Node"))
    if cfg is None:
        print(f"node-publisher: node {node_name} carries no dra-testbed.io/board label; nothing to publish", file=sys.stderr, flush=True)
        ready.reason = None  # nothing to publish is this node's job done
        publisher.stop.wait()
        return 0
    publisher.reload_published(node_name)
    publisher.nodes[node_name] = cfg
    print(f"node-publisher: publishing {node_name} ({cfg.board} x{cfg.count}, {cfg.mode.kind}) from {state_dir}", flush=True)
    checked = time.monotonic()
    while not publisher.stop.is_set():
        if time.monotonic() - checked > REPAIR_SECONDS:
            checked = time.monotonic()
            try:
                if not _repair(publisher, node_name):
                    ready.reason = "the node's slices in the API are not the ones published: publishing again"
            except Exception as exc:  # noqa: BLE001 - the API may be away for a moment: the next round looks again
                print(f"node-publisher: checking published slices: {type(exc).__name__}", file=sys.stderr, flush=True)
        if publisher.health.changed() or _state_stamp(state_dir) != publisher.stamps.get(node_name):
            try:
                publisher.settle(node_name, publisher.sync(cfg))
                ready.reason = None
            except Exception as exc:  # noqa: BLE001 - settle() made the next round write again
                ready.reason = f"publishing the node's slices failed: {type(exc).__name__}"
                print(f"node-publisher: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; retrying",
                      file=sys.stderr, flush=True)
                publisher.stop.wait(RETRY_SECONDS)
        publisher.stop.wait(POLL_SECONDS)
    publisher.pool.shutdown(wait=False, cancel_futures=True)
    publisher.health.close()
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 -m fake_gpus.driver.node_publisher", description=__doc__.splitlines()[0])
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--state-dir", required=True, type=Path)
    parser.add_argument("--nvml-lib-dir", required=True, type=Path)
    parser.add_argument("--kubeconfig", default="in-cluster")
    parser.add_argument("--ready-port", type=int, help="serve GET /readyz on this TCP port (the DaemonSet's readiness probe)")
    args = parser.parse_args(argv)
    ready = Readiness()
    if args.ready_port is not None:
        ReadyServer(args.ready_port, ready).start()  # a daemon thread: it ends with the process
    while True:  # the API may not answer yet right after a node boots: retry start-up, never crash-loop fast
        try:
            return run(args.node_name, args.state_dir, args.nvml_lib_dir, args.kubeconfig, ready)
        except Exception as exc:  # noqa: BLE001
            ready.reason = f"cannot start: {type(exc).__name__}"
            print(f"node-publisher: {type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}; retrying", file=sys.stderr, flush=True)
            time.sleep(2)


if __name__ == "__main__":
    sys.exit(main())
