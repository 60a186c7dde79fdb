"""Control-plane settings for large KWOK fleets (`--allow-large`): what a user running thousands of DRA
nodes would set on a stock control plane, measured by benchmarks/publish_scale.py.

Where the memory goes (apiserver heap profile, 200 nodes x 8 H100 in dynamic MIG, 41,600 devices): each
decoded copy of every ResourceSlice costs about 3.4 KB per device (every device carries a dozen attributes
and a map of counter consumptions of resource.Quantity), and the apiserver held two of them: its watch
cache (half its heap) and the Node authorizer's informer (the graph needs only each slice's node name, but
the informer keeps whole objects). The scheduler holds one more, the controller-manager's device-taint
controller another. Go's default GOGC=100 lets each process's heap grow to twice what is live.
"""

from __future__ import annotations

# The slices' watch cache off: lists and watches of slices go to etcd. The scheduler and the Node
# authorizer each decode their watch events themselves (a little CPU) instead of sharing one decoded copy
# that stays resident for the life of the apiserver.
APISERVER_ARGS = {"watch-cache-sizes": "resourceslices.resource.k8s.io#0"}
# The device-taint eviction controller keeps its own informer copy of every slice; a fleet of thousands of
# nodes is for scheduling at scale, device-taint eviction is tested on small beds.
CONTROLLER_MANAGER_ARGS = {"controllers": "*,-device-taint-eviction-controller"}
# Collect when the heap has grown by half of what is live instead of doubling it: peak RSS near 1.5x
# live for some more GC CPU, on the three components that hold every slice.
GOGC = "50"
GO_COMPONENTS = ("kube-apiserver", "kube-scheduler", "kube-controller-manager")


def component_patches(large: bool) -> dict[str, dict[str, dict[str, str]]]:
    """Per kwokctl component: extra args and environment variables; nothing unless `large`."""
    if not large:
        return {}
    patches: dict[str, dict[str, dict[str, str]]] = {c: {"args": {}, "envs": {"GOGC": GOGC}} for c in GO_COMPONENTS}
    patches["kube-apiserver"]["args"].update(APISERVER_ARGS)
    patches["kube-controller-manager"]["args"].update(CONTROLLER_MANAGER_ARGS)
    return patches
