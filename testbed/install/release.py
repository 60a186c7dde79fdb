"""A release of the chart in a cluster: `helm install` of the layout's values, `helm uninstall` and the wait
until every object it made is gone.

Why helm itself rather than `kubectl apply` of rendered manifests: helm records what a release made (its
stored manifest), so `uninstall` deletes exactly those objects and nothing else, and a platform team sees
and manages the release with its own helm. Two things helm leaves behind are handled here: the namespace
(helm never deletes one, so we create it when missing, mark it, and delete it at uninstall when marked) and
what the cluster made from the release's objects (ResourceSlices and node Leases, owned by the fake Nodes,
gone by garbage collection: waited for)."""

from __future__ import annotations

import json
import subprocess
import tempfile
import time
from pathlib import Path

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.driver.identity import DriverIdentity
from testbed.clusters.layout import Layout
from testbed.errors import EnvironmentProblem
from testbed.install.collisions import check_collisions
from testbed.install.values import CHART_DIR_NAME, RELEASE_LABEL, chart_values
from testbed.toolchain.renderers import ensure_renderer

CHART = Path(__file__).resolve().parents[2] / "charts" / CHART_DIR_NAME
CREATED_BY = "dra-fake-gpus.io/created-by-release"  # on a namespace install made: uninstall deletes it
GONE_TIMEOUT = 120.0


class ReleaseError(EnvironmentProblem):
    """helm or the cluster failed; the message is one line."""


def helm(kubeconfig: Path, *args: str) -> str:
    """Run our helm (built from its Go module) against `kubeconfig`; its stdout, ReleaseError on failure."""
    out = subprocess.run([str(ensure_renderer("helm")), "--kubeconfig", str(kubeconfig), *args],
                         capture_output=True, text=True)
    if out.returncode != 0:
        lines = out.stderr.strip().splitlines() or ["(no output)"]
        raise ReleaseError(f"helm {args[0]} failed: {lines[-1]}")
    return out.stdout


def render(layout: Layout, release: str, namespace: str, image: str | None = None, device_classes: bool = True,
           kwok_image: str | None = None) -> str:
    """The release's manifests as `helm template` renders them (no cluster needed)."""
    with tempfile.NamedTemporaryFile("w", suffix=".json") as values:
        json.dump(chart_values(layout, image, device_classes, kwok_image), values)
        values.flush()
        out = subprocess.run([str(ensure_renderer("helm")), "template", release, str(CHART), "--namespace", namespace,
                              "--values", values.name], capture_output=True, text=True)
    if out.returncode != 0:
        raise ReleaseError(f"helm template failed: {(out.stderr.strip().splitlines() or ['(no output)'])[-1]}")
    return out.stdout


def install(kubeconfig: Path, layout: Layout, release: str, namespace: str, image: str | None = None,
            device_classes: bool = True, kwok_image: str | None = None) -> bool:
    """Refuse a colliding install (CollisionError), then install the release. The DeviceClasses are made
    only when asked and the cluster has none of that name (NVIDIA's, a bed's); returns whether they were."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        check_collisions(api, layout, release)
        existing = {c.metadata.name for c in client.ResourceV1Api(api).list_device_class().items}
        ours = DriverIdentity()
        device_classes = device_classes and not existing & {ours.gpu_class, ours.mig_class}
        core = client.CoreV1Api(api)
        created = False
        try:
            core.read_namespace(namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
            core.create_namespace({"metadata": {"name": namespace, "labels": {CREATED_BY: release}}})
            created = True
        try:
            with tempfile.NamedTemporaryFile("w", suffix=".json") as values:
                json.dump(chart_values(layout, image, device_classes, kwok_image), values)
                values.flush()
                helm(kubeconfig, "install", release, str(CHART), "--namespace", namespace, "--values", values.name)
        except ReleaseError:
            if created:  # a failed install leaves nothing of ours behind
                core.delete_namespace(namespace)
            raise
    finally:
        api.close()
    return device_classes


def uninstall(kubeconfig: Path, release: str, namespace: str, timeout: float = GONE_TIMEOUT) -> None:
    """Uninstall the release and return once every object it made, and every object the cluster made from
    them (slices, leases, pods bound to its nodes), is gone; the namespace too when install created it."""
    from kubernetes import config

    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        core = client.CoreV1Api(api)
        fleet = [n.metadata.name for n in core.list_node(label_selector=f"{RELEASE_LABEL}={release}").items]
        helm(kubeconfig, "uninstall", release, "--namespace", namespace, "--wait")
        try:
            ns = core.read_namespace(namespace)
            if (ns.metadata.labels or {}).get(CREATED_BY) == release:
                core.delete_namespace(namespace)
        except ApiException as exc:
            if exc.status != 404:
                raise
        _wait_gone(api, release, namespace, timeout, fleet)
    finally:
        api.close()


def _delete_pods_on(core: client.CoreV1Api, nodes: list[str]) -> list[client.V1Pod]:
    """Delete at once the pods bound to the fake nodes (a DaemonSet's, a user's), returning them: no kubelet
    confirms their end, so a graceful delete would wait for the pod garbage collector's quarantine of orphans."""
    pods = [p for node in nodes for p in core.list_pod_for_all_namespaces(field_selector=f"spec.nodeName={node}").items]
    for pod in pods:
        try:
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise
    return pods


def _orphans(api: client.ApiClient) -> list[str]:
    """Slices and node Leases whose owning Node is gone: the garbage collector has yet to delete them."""
    core = client.CoreV1Api(api)
    present = {n.metadata.name for n in core.list_node().items}
    owned = [("slice", o) for o in client.ResourceV1Api(api).list_resource_slice().items]
    owned += [("lease", o) for o in client.CoordinationV1Api(api).list_namespaced_lease("kube-node-lease").items]
    return [f"{kind} {o.metadata.name}" for kind, o in owned
            if any(ref.kind == "Node" and ref.name not in present for ref in o.metadata.owner_references or [])]


def _wait_gone(api: client.ApiClient, release: str, namespace: str, timeout: float, fleet: list[str]) -> None:
    core = client.CoreV1Api(api)
    deadline = time.monotonic() + timeout
    while True:
        left = [f"node {n.metadata.name}" for n in core.list_node(label_selector=f"{RELEASE_LABEL}={release}").items]
        left += [f"pod {p.metadata.namespace}/{p.metadata.name}" for p in _delete_pods_on(core, fleet)]
        left += _orphans(api)
        left += [f"namespace {n.metadata.name}" for n in core.list_namespace(label_selector=f"{CREATED_BY}={release}").items]
        if not left:
            return
        if time.monotonic() > deadline:
            raise ReleaseError(f"uninstall of {release}: still there after {timeout:.0f} s: {', '.join(left[:5])}")
        time.sleep(1)
