"""Ports for a KWOK cluster's components, chosen by the kernel rather than by kwokctl.

Why: kwokctl finds a "free" port by counting down from 32767 and probing, so every kwokctl run on the
machine takes the highest port nothing listens on at that moment. A component of ours that is down for a
second (killed and restarting, as the fault campaign does, or crashed) frees its port; the next cluster
created anywhere on the machine takes it, and ours cannot start again until that cluster is gone.
Reproduced: a killed kube-scheduler's port taken by the next cluster's etcd, the restarted scheduler
exiting with "bind: address already in use" (the likely cause of the 48 scheduler exits nobody asked
for in a 100-kill campaign with many clusters made around it). The kernel's choice (bind to port 0) is random within the ephemeral range
(32768-60999 by default), which kwokctl's countdown never reaches.
"""

from __future__ import annotations

import socket

# kwokctl's option for each component's port (every one it would otherwise pick itself)
COMPONENT_PORTS = ("etcdPort", "etcdPeerPort", "kubeApiserverPort", "kubeControllerManagerPort", "kubeSchedulerPort",
                   "kwokControllerPort")


def kernel_ports(count: int, host: str = "127.0.0.1") -> list[int]:
    """`count` distinct ports the kernel hands out for `host` right now (all held until all are chosen)."""
    held: list[socket.socket] = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            held.append(sock)
            sock.bind((host, 0))
        return [sock.getsockname()[1] for sock in held]
    finally:
        for sock in held:
            sock.close()


def component_ports(apiserver_port: int | None = None) -> dict[str, int]:
    """kwokctl option -> port for every component; `apiserver_port` (the user's --port) is kept as given."""
    wanted = [name for name in COMPONENT_PORTS if not (name == "kubeApiserverPort" and apiserver_port)]
    ports = dict(zip(wanted, kernel_ports(len(wanted))))
    if apiserver_port:
        ports["kubeApiserverPort"] = apiserver_port
    return ports
