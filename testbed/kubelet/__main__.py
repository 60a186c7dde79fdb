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
    args = p.parse_args(argv)
    nodes = {}
    for item in args.node:
        name, sep, where = item.partition("=")
        if not sep or not name or not where:
            p.error(f"--node {item!r}: expected NAME=REGISTRY_DIR")
        nodes[name] = Path(where)
    daemon = daemon_for(config.new_client_from_config(config_file=args.kubeconfig), nodes, args.driver, args.k8s)
    signal.signal(signal.SIGTERM, lambda *_: daemon.stop.set())
    daemon.run()
    return 0


if __name__ == "__main__":
    sys.exit(main())
