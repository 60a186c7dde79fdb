"""Pod networking of a kind cluster: kind's default CNI is off; every node gets a ptp + host-local config
of its own (one /24 per node, masquerading off-subnet traffic) and, after boot, routes to the other
nodes' /24s. Also removes kind's Docker network once it is unused."""

from __future__ import annotations

from testbed.host.docker.dockerd import DockerError, docker

POD_SUBNET = "10.244.0.0/16"
CNI_CONF_IN_NODE = "/etc/cni/net.d/10-dra-testbed.conflist"


def pod_cidr(index: int) -> str:
    """The /24 of POD_SUBNET that node `index` (0 = control plane) hands out."""
    return f"10.244.{index}.0/24"


def cni_config(index: int) -> dict:
    """ptp + host-local for node `index`; masquerading lets pods reach any node without more routes."""
    return {
        "cniVersion": "1.0.0",
        "name": "dra-testbed",
        "plugins": [
            {"type": "ptp", "ipMasq": True, "mtu": 1500,
             "ipam": {"type": "host-local", "ranges": [[{"subnet": pod_cidr(index)}]], "routes": [{"dst": "0.0.0.0/0"}]}},
            {"type": "portmap", "capabilities": {"portMappings": True}},
        ],
    }


def remove_kind_network_if_unused() -> None:
    """Remove kind's Docker network once no container is attached to it (kind leaves it behind)."""
    try:
        out = docker("network", "inspect", "kind", "--format", "{{len .Containers}}", check=False)
        if out.returncode == 0 and out.stdout.strip() == "0":
            docker("network", "rm", "kind", check=False)
    except DockerError:
        pass
