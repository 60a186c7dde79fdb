"""Drain a node as `kubectl drain` does, through the real API: cordon it, evict its pods, wait until they are gone.

Used before a node's hardware changes (boards replaced, MIG mode switched): what a real operator must do,
since a claim allocated on a device that is about to vanish would be stranded. Eviction (policy/v1) honours
PodDisruptionBudgets and the pods' grace periods, so a kubelet unprepares their claims before they go.
"""

from __future__ import annotations

from kubernetes import client

from testbed.kube.waiting import until


def cordon(core: client.CoreV1Api, node: str, unschedulable: bool = True) -> None:
    """Mark `node` unschedulable (or schedulable again with `unschedulable=False`)."""
    core.patch_node(node, {"spec": {"unschedulable": unschedulable or None}})


def drain(core: client.CoreV1Api, node: str, timeout: float = 120.0) -> list[tuple[str, str]]:
    """Cordon `node`, evict every pod bound to it, wait until they are gone; returns their (namespace, name).

    The node stays cordoned: `cordon(core, node, False)` when it may take pods again."""
    cordon(core, node)
    pods = [p for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
            if p.status.phase not in ("Succeeded", "Failed")]
    for pod in pods:
        body = client.V1Eviction(metadata=client.V1ObjectMeta(name=pod.metadata.name, namespace=pod.metadata.namespace))
        try:
            core.create_namespaced_pod_eviction(pod.metadata.name, pod.metadata.namespace, body)
        except client.ApiException as exc:
            if exc.status != 404:  # gone already
                raise
    uids = {p.metadata.uid for p in pods}

    def gone() -> bool:
        left = core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items
        return not any(p.metadata.uid in uids for p in left)

    until(f"pods of {node} evicted and gone", gone, timeout=timeout)
    return [(p.metadata.namespace, p.metadata.name) for p in pods]
