"""`dra-testbed gpu drain|undrain`: take a node's GPUs, or one device, out of service for maintenance and back.

A drain is a DeviceTaintRule (testbed.kube.device_taint_rules) tainting the device, or every device of the
node's pool, with `dra-testbed.io/maintenance`: NoSchedule keeps new claims off while running pods stay,
NoExecute (the default, a real drain) has the controller-manager evict the pods using them. Nothing on the
node changes; `undrain` deletes the rule. One rule per node and device, so draining twice is refused.
"""

from __future__ import annotations

import argparse
import re

from testbed.cli.arguments import add_cluster_lookup
from testbed.errors import BadInputError

EFFECTS = ("NoExecute", "NoSchedule")


def rule_name(node: str, device: str | None) -> str:
    """The drain's rule name: one per node (and device), valid as a Kubernetes name."""
    raw = f"drain-{node}" + (f"-{device}" if device else "")
    return re.sub(r"[^a-z0-9.-]", "-", raw.lower())[:253].strip("-.")


def _published_devices(api, driver: str, node: str) -> set[str] | None:
    """The devices `driver` publishes in `node`'s pool (None: the node has no slice of that driver)."""
    from kubernetes import client

    slices = [s for s in client.ResourceV1Api(api).list_resource_slice().items
              if s.spec.driver == driver and s.spec.pool.name == node]
    return {d.name for s in slices for d in s.spec.devices or []} if slices else None


def cmd_drain(args: argparse.Namespace) -> int:
    from fake_gpus.driver.identity import current_identity
    from testbed.cli.gpu_health import running_cluster
    from testbed.kube.apiretry import retrying_client
    from testbed.kube.device_taint_rules import DRAIN_KEY, DeviceTaintRulesNotServed, create_rule, delete_rule, get_rule

    cluster = running_cluster(args)
    driver = args.driver_name or current_identity().driver
    name = rule_name(args.node, args.device)
    api = retrying_client(str(cluster.kubeconfig()))
    try:
        devices = _published_devices(api, driver, args.node)
        if devices is None:
            raise BadInputError(f"node {args.node!r} of cluster {cluster.name!r} has no ResourceSlice of {driver}; "
                                f"valid: a GPU node (`kubectl get resourceslices`)")
        if args.device is not None and args.device not in devices:
            raise BadInputError(f"node {args.node!r} publishes no device {args.device!r}; valid: {', '.join(sorted(devices))}")
        try:
            if args.action == "undrain":
                gone = delete_rule(api, name)
                what = f"{args.device} of node {args.node}" if args.device else f"node {args.node}"
                print(f"undrained {what}" if gone else f"{what} was not drained (no rule {name})")
                return 0
            if get_rule(api, name) is not None:
                raise BadInputError(f"{args.device or 'node ' + args.node} is drained already (rule {name}); valid: "
                                    f"`dra-testbed gpu undrain --name {cluster.name} {args.node}{' ' + args.device if args.device else ''}` first")
            create_rule(api, name, driver, args.node, args.device, args.effect)
        except DeviceTaintRulesNotServed as exc:
            raise BadInputError(f"cluster {cluster.name!r}: {exc}") from None
    finally:
        api.close()
    print(f"drained {args.device or 'every device'} of node {args.node}: DeviceTaintRule {name} ({DRAIN_KEY}, {args.effect})")
    return 0


def add_actions(actions: argparse._SubParsersAction) -> None:
    """Add `drain` and `undrain` to the `gpu` command's actions."""
    drain = actions.add_parser("drain", help="taint a node's devices (or one) for maintenance with a DeviceTaintRule")
    undrain = actions.add_parser("undrain", help="delete the drain's DeviceTaintRule: the devices take claims again")
    for p in (drain, undrain):
        add_cluster_lookup(p)
        p.add_argument("node", help="node name (its pool of the driver's slices)")
        p.add_argument("device", nargs="?", help="a device as its slice names it (e.g. gpu-0); default: every device of the node")
        p.add_argument("--driver-name", default=None, help="the DRA driver whose devices to taint (default gpu.nvidia.com)")
        p.set_defaults(func=cmd_drain)
    drain.add_argument("--effect", choices=EFFECTS, default="NoExecute",
                       help="NoExecute (default): evict pods using them; NoSchedule: keep new claims off, running pods stay")
