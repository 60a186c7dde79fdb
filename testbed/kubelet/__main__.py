"""python -m testbed.kubelet --kubeconfig FILE --driver NAME [--node NAME=REGISTRY_DIR ...] [--plugins-dir DIR] (SIGTERM ends it)."""

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
    p.add_argument("--node", action="append", default=[], metavar="NAME=REGISTRY_DIR", help="a node whose plugin runs already")
    p.add_argument("--plugins-dir", type=Path, metavar="DIR",
                   help="<node>.json files (testbed.kubelet.process.OnDemand): nodes whose plugin is started when a pod needs it, read every round")
    args = p.parse_args(argv)
    nodes = _pairs(p, "--node", args.node)
    if not nodes and args.plugins_dir is None:
        p.error("no node: give --node NAME=REGISTRY_DIR or --plugins-dir DIR")
    daemon = daemon_for(config.new_client_from_config(config_file=args.kubeconfig), nodes, args.driver, args.k8s,
                        plugins_dir=args.plugins_dir)
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
