"""Pods, claims and node checks shared by the kind suites (ours and NVIDIA's driver)."""

from __future__ import annotations

import json
import subprocess
import time
import uuid
from typing import Iterator

from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import current_identity, parse_device_name
from fake_gpus.nvml.state import validate_state_dir
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import wait_for

IDENTITY = current_identity()
H100 = get_board("h100-80gb")


def claim_template(name: str, device_class: str, selector: str) -> dict:
    request = {"name": "gpu", "exactly": {"deviceClassName": device_class, "selectors": [{"cel": {"expression": selector}}]}}
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate", "metadata": {"name": name},
            "spec": {"spec": {"devices": {"requests": [request]}}}}


def gpu_pod(name: str, image: str, layout_node: str, template: str) -> dict:
    return {
        "apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
        "spec": {
            "nodeSelector": {"dra-testbed.io/layout-node": layout_node}, "terminationGracePeriodSeconds": 1,
            "containers": [{"name": "main", "image": image, "imagePullPolicy": "Never", "args": ["--sleep"],
                            "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        },
    }


def run_pod(bed, namespace: str, pod: dict) -> dict:
    """Create the pod, wait until it runs, return what its container printed (NVML as JSON)."""
    name = pod["metadata"]["name"]
    bed.core.create_namespaced_pod(namespace, pod)
    wait_for(bed.core.list_namespaced_pod, lambda p: p.status.phase == "Running", name=name, namespace=namespace,
             what=f"pod {name} to run", timeout=180)
    deadline = time.monotonic() + 30
    while True:
        lines = bed.core.read_namespaced_pod_log(name, namespace).strip().splitlines()
        if lines:
            return json.loads(lines[-1])
        assert time.monotonic() < deadline, f"pod {name} printed nothing"
        time.sleep(0.5)


def allocated_device(bed, namespace: str, pod_name: str) -> str:
    pod = bed.core.read_namespaced_pod(pod_name, namespace)
    claim = bed.resource.read_namespaced_resource_claim(pod.status.resource_claim_statuses[0].resource_claim_name, namespace)
    return claim.status.allocation.devices.results[0].device


def cdi_specs(bed, layout_node: str) -> list[str]:
    """CDI spec files of our driver on the node (in the node container's /var/run/cdi)."""
    out = subprocess.run(["docker", "exec", bed.worker(layout_node), "ls", "/var/run/cdi"], capture_output=True, text=True)
    return [name for name in out.stdout.split() if IDENTITY.driver in name]


def delete_pod(bed, namespace: str, name: str, layout_node: str) -> None:
    """Delete the pod and return once the node's plugin has unprepared its claims.

    The pod object goes at once (grace 0); the kubelet unprepares afterwards, and the plugin removes a
    claim's CDI spec (named by the claim's UID) last, after destroying what it created."""
    pod = bed.core.read_namespaced_pod(name, namespace)
    uids = [bed.resource.read_namespaced_resource_claim(s.resource_claim_name, namespace).metadata.uid
            for s in pod.status.resource_claim_statuses or []]
    bed.core.delete_namespaced_pod(name, namespace, grace_period_seconds=0)
    deadline = time.monotonic() + 120
    while True:
        try:
            bed.core.read_namespaced_pod(name, namespace)
        except ApiException as exc:
            if exc.status == 404:
                break
        assert time.monotonic() < deadline, f"pod {name} not gone after 120s"
        time.sleep(0.5)
    while any(uid in spec for spec in cdi_specs(bed, layout_node) for uid in uids):
        assert time.monotonic() < deadline, f"the claims of pod {name} not unprepared on {layout_node} after 120s"
        time.sleep(0.5)


def placement_of(device: str) -> tuple[int, int]:
    """(start, size) of a MIG device of the H100 workers: its start as the name `gpu-<minor>-mig-<profile>-<profile
    id>-<start>` spells it, its size the memory slices of that profile on the board."""
    ref = parse_device_name(device)
    assert ref.is_mig, device
    return ref.start, H100.profile_by_id(ref.profile_id).memory_slices


def gpu_instances(bed, layout_node: str) -> list[tuple[int, int, int]]:
    """(profile id, start, size) of every GPU instance the node's NVML state holds."""
    _, mig = validate_state_dir(bed.state_dir(layout_node))
    return [(gi.profile_id, gi.start, gi.size) for gi in mig.gpu_instances]


def scratch_namespace(bed, prefix: str = "t") -> Iterator[str]:
    """A fresh namespace for one test, deleted afterwards (a fixture's body: `yield from`)."""
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    create_namespace(bed.core, name)
    yield name
    bed.core.delete_namespace(name, grace_period_seconds=0)
