"""Control-plane settings for large KWOK fleets (`--allow-large`): what a user running thousands of DRA
nodes would set on a stock control plane, measured by benchmarks/publish_scale.py.

Where the memory goes (apiserver heap profile, 200 nodes x 8 H100 in dynamic MIG, 41,600 devices): each
decoded copy of every ResourceSlice costs about 3.4 KB per device (every device carries a dozen attributes
and a map of counter consumptions of resource.Quantity), and the apiserver held two of them: its watch
cache (half its heap) and the Node authorizer's informer (the graph needs only each slice's node name, but
the informer keeps whole objects). The scheduler holds one more, the controller-manager's device-taint
controller another, and its garbage collector one more (it watches every resource through the typed
informers where there are any, so whole slices, not their metadata). Go's default GOGC=100 lets each
process's heap grow to twice what is live.
"""

from __future__ import annotations

# The slices' watch cache off: lists and watches of slices go to etcd. The scheduler and the
# controller-manager each decode their watch events themselves (a little CPU) instead of sharing one decoded copy
# that stays resident for the life of the apiserver.
APISERVER_ARGS = {"watch-cache-sizes": "resourceslices.resource.k8s.io#0"}
# Authorization by RBAC alone: the Node authorizer is for kubelets' own credentials, and KWOK nodes run no
# kubelet (our driver's per-node tokens are a service account's, held to their node by the admission
# policy, not by the Node authorizer). Its graph keeps an informer copy of every ResourceSlice (3.7 KB per
# device: 154 of the apiserver's 317 MB at 200 nodes x 8 H100 in dynamic MIG). kwokctl sets the flag
# itself, so this one replaces its value rather than adding a second.
APISERVER_OVERRIDES = {"authorization-mode": "RBAC"}
# The device-taint eviction controller keeps its own informer copy of every slice; a fleet of thousands of
# nodes is for scheduling at scale, device-taint eviction is tested on small beds.
CONTROLLER_MANAGER_ARGS = {"controllers": "*,-device-taint-eviction-controller"}
# Collect when the heap has grown by half of what is live instead of doubling it: peak RSS near 1.5x
# live for some more GC CPU, on the two components that hold every slice. The apiserver holds none with the
# settings above (no watch cache of slices, no Node authorizer graph), so its heap is the requests in flight;
# there GOGC=50 only doubled the collector's CPU, which was a third of the apiserver's while publishing.
GOGC = "50"
GO_COMPONENTS = ("kube-scheduler", "kube-controller-manager")
PATCHED_COMPONENTS = ("kube-apiserver", *GO_COMPONENTS)


def component_patches(large: bool) -> dict[str, dict[str, dict[str, str]]]:
    """Per kwokctl component: extra args, args replacing kwokctl's own ("overrides") and environment
    variables; nothing unless `large`."""
    if not large:
        return {}
    patches: dict[str, dict[str, dict[str, str]]] = {
        c: {"args": {}, "overrides": {}, "envs": {"GOGC": GOGC} if c in GO_COMPONENTS else {}} for c in PATCHED_COMPONENTS}
    patches["kube-apiserver"]["args"].update(APISERVER_ARGS)
    patches["kube-apiserver"]["overrides"].update(APISERVER_OVERRIDES)
    patches["kube-controller-manager"]["args"].update(CONTROLLER_MANAGER_ARGS)
    return patches
