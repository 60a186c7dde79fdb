"""python -m testbed.kubelet --kubeconfig FILE --driver NAME --node NAME=REGISTRY_DIR ... (SIGTERM ends it)."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path

from kubernetes import config

from testbed.kubelet.daemon import daemon_for


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m testbed.kubelet", description=__doc__)
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--driver", default="gpu.nvidia.com")
    p.add_argument("--k8s", default="1.34")
    p.add_argument("--node", action="append", default=[], metavar="NAME=REGISTRY_DIR", required=True)
    p.add_argument("--start", action="append", default=[], metavar="NAME=ON_DEMAND_JSON",
                   help="start this node's plugin (testbed.kubelet.process.OnDemand) when a pod needs it")
    args = p.parse_args(argv)
    nodes, starts = _pairs(p, "--node", args.node), _pairs(p, "--start", args.start)
    if set(starts) - set(nodes):
        p.error(f"--start {sorted(set(starts) - set(nodes))[0]}: no --node of that name")
    daemon = daemon_for(config.new_client_from_config(config_file=args.kubeconfig), nodes, args.driver, args.k8s, starts)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop.set())
    daemon.run()
    return 0


def _pairs(p: argparse.ArgumentParser, flag: str, items: list[str]) -> dict[str, Path]:
    out = {}
    for item in items:
        name, sep, where = item.partition("=")
        if not sep or not name or not where:
            p.error(f"{flag} {item!r}: expected NAME=PATH")
        out[name] = Path(where)
    return out


if __name__ == "__main__":
    sys.exit(main())
