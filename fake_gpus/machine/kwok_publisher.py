"""The KWOK publisher process: every simulated node's hardware and our driver's slices, in one process.

`python -m fake_gpus.machine.kwok_publisher --config FILE`. KWOK nodes have no kubelet, so one process
on the host plays both parts: the machine (fake_gpus.machine.provision makes each labelled node's state
directory, OS views and static MIG layout) and the driver (fake_gpus.driver.publisher reads every GPU
through NVML only and publishes the slices). SIGTERM ends it.

Config (JSON): {"kubeconfig", "state_root", "ready_file", "node_identity", "serves", "device_classes",
"nvml_lib_dir"}. "kubeconfig" "in-cluster": the pod's service account (the Helm chart's Deployment, charts/);
"serves": the dra-testbed.io/driver label value of the nodes served (default "ours"); "device_classes": false
leaves the DeviceClasses to someone else; "nvml_lib_dir": the fake library built already (an image's). With "node_identity"
({"namespace", "service_account"}) each node's slices are written with that service account's token bound to
the node (fake_gpus/driver/credentials.py), as each kind node's driver writes with its pod's; without it
(benchmarks' baseline) with the kubeconfig's own credential.
"""

from __future__ import annotations

import argparse
import functools
import json
import signal
import sys
from pathlib import Path

from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver.credentials import NodeIdentity, NodeTokens
from fake_gpus.driver.faults import active_faults
from fake_gpus.driver.identity import current_identity
from fake_gpus.driver.nvml_adapter import NvmlLibrary
from fake_gpus.driver.client_modules import preload_api_modules
from fake_gpus.driver.publisher import Publisher, connect
from fake_gpus.driver.slices import api_limits, server_minor
from fake_gpus.machine.provision import provision


def in_cluster() -> tuple[client.ApiClient, object]:
    """An API client of the pod's service account and the server version (the chart's Deployment)."""
    cfg = client.Configuration()
    config.load_incluster_config(client_configuration=cfg)
    api = client.ApiClient(cfg)
    return api, client.VersionApi(api).get_code()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fake_gpus.machine.kwok_publisher", description=__doc__.splitlines()[0])
    parser.add_argument("--config", required=True, type=Path, help="publisher config (JSON)")
    args = parser.parse_args(argv)
    cfg = json.loads(args.config.read_text())
    from fake_gpus.nvml.build import SONAME, ensure_library  # the fake library stands in for the real one

    nvml = NvmlLibrary((Path(cfg["nvml_lib_dir"]) if cfg.get("nvml_lib_dir") else ensure_library()) / SONAME)
    preload_api_modules()
    api, version = in_cluster() if cfg["kubeconfig"] == "in-cluster" else connect(Path(cfg["kubeconfig"]))
    limits = api_limits(server_minor(version))
    tokens = NodeTokens(api, NodeIdentity(**cfg["node_identity"])) if cfg.get("node_identity") else None
    publisher = Publisher(api, nvml, Path(cfg["state_root"]), functools.partial(provision, nvml=nvml), current_identity(),
                          active_faults(), limits, credentials=tokens, serves=cfg.get("serves", "ours"),
                          classes=cfg.get("device_classes", True))
    signal.signal(signal.SIGTERM, lambda *_: publisher.stop.set())
    signal.signal(signal.SIGINT, lambda *_: publisher.stop.set())
    try:
        publisher.run(Path(cfg["ready_file"]) if cfg.get("ready_file") else None)
    except Exception as exc:  # noqa: BLE001 - start-up failures end the process with one line
        body = getattr(exc, "body", None)
        detail = f"{exc.status} {json.loads(body).get('message', '')}" if isinstance(exc, ApiException) and body else str(exc)
        print(f"publisher: error: {type(exc).__name__}: {detail}".splitlines()[0], file=sys.stderr, flush=True)
        return 1
    finally:
        publisher.pool.shutdown(wait=False, cancel_futures=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
