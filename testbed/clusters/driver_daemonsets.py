"""What may be done to a driver deployed as DaemonSets on a bed of our own (kind's abilities DriverRestart,
DriverRoll, DriverPause): restart its pods, roll it out again, keep it off the nodes for a while. Only the
Kubernetes API is used, so any vendor's DaemonSet is handled like ours; the driver's DaemonSets are the ones
whose pods mount the kubelet's plugin directory (that is how a DRA kubelet plugin reaches the kubelet).
"""

from __future__ import annotations

import datetime
import time
from contextlib import contextmanager
from typing import Callable, Iterator

from kubernetes import client

PLUGINS_DIR = "/var/lib/kubelet/plugins"
PAUSE_LABEL = "dra-testbed.io/conformance-driver-paused"
TIMEOUT = 300.0


def driver_daemonsets(api: client.ApiClient) -> list[client.V1DaemonSet]:
    """DaemonSets (outside kube-system) whose pods mount the kubelet's plugin directory."""
    found = []
    for ds in client.AppsV1Api(api).list_daemon_set_for_all_namespaces().items:
        if ds.metadata.namespace == "kube-system":
            continue
        volumes = ds.spec.template.spec.volumes or []
        if any(v.host_path and v.host_path.path.rstrip("/").startswith(PLUGINS_DIR) for v in volumes):
            found.append(ds)
    return found


def _pods(api: client.ApiClient, ds: client.V1DaemonSet) -> list[client.V1Pod]:
    selector = ",".join(f"{k}={v}" for k, v in (ds.spec.selector.match_labels or {}).items())
    return client.CoreV1Api(api).list_namespaced_pod(ds.metadata.namespace, label_selector=selector).items


def _settled(api: client.ApiClient, ds: client.V1DaemonSet) -> bool:
    """The DaemonSet's current generation is rolled out and every pod it wants is ready."""
    now = client.AppsV1Api(api).read_namespaced_daemon_set(ds.metadata.name, ds.metadata.namespace)
    s = now.status
    return (s.observed_generation or 0) >= now.metadata.generation and s.updated_number_scheduled == s.desired_number_scheduled \
        and s.number_ready == s.desired_number_scheduled and (s.number_unavailable or 0) == 0


def wait_rolled_out(api: client.ApiClient, timeout: float = TIMEOUT, wanted: Callable[[], bool] = lambda: True) -> None:
    """Until every driver DaemonSet is rolled out and ready (and `wanted()` holds)."""
    deadline = time.monotonic() + timeout
    while not (all(_settled(api, ds) for ds in driver_daemonsets(api)) and wanted()):
        if time.monotonic() > deadline:
            raise TimeoutError(f"the driver's DaemonSets are not rolled out after {timeout:.0f}s")
        time.sleep(1)


def restart_pods(api: client.ApiClient, grace: int | None = 0) -> None:
    """Delete every driver pod at once (a crash-like restart with grace 0) and wait for their successors."""
    core = client.CoreV1Api(api)
    old = set()
    for ds in driver_daemonsets(api):
        for pod in _pods(api, ds):
            old.add(pod.metadata.uid)
            core.delete_namespaced_pod(pod.metadata.name, pod.metadata.namespace, grace_period_seconds=grace)

    def replaced() -> bool:
        pods = [p for ds in driver_daemonsets(api) for p in _pods(api, ds)]
        return not any(p.metadata.uid in old for p in pods)

    wait_rolled_out(api, wanted=replaced)


def roll_out(api: client.ApiClient) -> None:
    """A rolling update, as `kubectl rollout restart` makes one: a new pod template, rolled node by node."""
    apps = client.AppsV1Api(api)
    stamp = datetime.datetime.now(datetime.timezone.utc).isoformat()
    for ds in driver_daemonsets(api):
        apps.patch_namespaced_daemon_set(ds.metadata.name, ds.metadata.namespace, {
            "spec": {"template": {"metadata": {"annotations": {"kubectl.kubernetes.io/restartedAt": stamp}}}}})
    wait_rolled_out(api)


@contextmanager
def paused(api: client.ApiClient) -> Iterator[None]:
    """The driver off every node (its DaemonSets select no node) inside, back and ready afterwards."""
    apps = client.AppsV1Api(api)
    sets = driver_daemonsets(api)

    def select(value: str | None) -> None:
        for ds in sets:
            apps.patch_namespaced_daemon_set(ds.metadata.name, ds.metadata.namespace,
                                             {"spec": {"template": {"spec": {"nodeSelector": {PAUSE_LABEL: value}}}}})

    select("true")
    try:
        deadline = time.monotonic() + TIMEOUT
        while any(_pods(api, ds) for ds in sets):
            if time.monotonic() > deadline:
                raise TimeoutError(f"the driver's pods are still there {TIMEOUT:.0f}s after pausing it")
            time.sleep(0.5)
        yield
    finally:
        select(None)
        wait_rolled_out(api)
