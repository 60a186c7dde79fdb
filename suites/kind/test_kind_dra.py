"""DRA on real kubelets: the driver prepares claims, and a container sees its device through NVML."""

from __future__ import annotations

import os


import time

import pytest

from fake_gpus.nvml.state import validate_state_dir
from suites.kind.pods import (H100, IDENTITY, allocated_device, cdi_specs, claim_template, delete_pod, gpu_instances, gpu_pod,
                              placement_of, run_pod, scratch_namespace)
from testbed.clusters.kind.driver import DRIVER_NAMESPACE
from testbed.kube.waiting import wait_for

pytestmark = [pytest.mark.kind, pytest.mark.slow]

MIG_PROFILE_1G10GB = 19  # nvidia-smi mig -lgip on H100 80GB


def one_1g_template(bed, namespace: str) -> str:
    """A claim template `one-1g` for one 1g.10gb MIG device; returns its name."""
    bed.resource.create_namespaced_resource_claim_template(
        namespace, claim_template("one-1g", IDENTITY.mig_class, f"device.attributes['{IDENTITY.driver}'].profile == '1g.10gb'"))
    return "one-1g"


@pytest.fixture
def namespace(kind_bed):
    yield from scratch_namespace(kind_bed)


def test_whole_h100_claim_shows_exactly_that_gpu(kind_bed, namespace) -> None:
    kind_bed.resource.create_namespaced_resource_claim_template(
        namespace, claim_template("one-h100", IDENTITY.gpu_class, f"device.attributes['{IDENTITY.driver}'].productName == '{H100.product_name}'"))
    seen = run_pod(kind_bed, namespace, gpu_pod("whole", kind_bed.workload_image, "gpu-whole", "one-h100"))
    assert "error" not in seen, seen
    assert [d["name"] for d in seen["devices"]] == [H100.product_name]
    gpus, _ = validate_state_dir(kind_bed.state_dir("gpu-whole"))
    # the node has two: the container sees the one allocated, not the other
    device = allocated_device(kind_bed, namespace, "whole")
    assert len(gpus) == 2 and seen["devices"][0]["uuid"] == next(g.uuid for g in gpus if f"gpu-{g.minor}" == device)
    assert seen["devices"][0]["memory_total"] == H100.memory_mib * 2**20


def test_dynamic_1g10gb_exists_while_the_pod_runs_and_not_after(kind_bed, namespace) -> None:
    template = one_1g_template(kind_bed, namespace)
    seen = run_pod(kind_bed, namespace, gpu_pod("mig", kind_bed.workload_image, "gpu-mig", template))
    assert "error" not in seen, seen
    migs = [m for d in seen["devices"] for m in d["mig_devices"]]
    assert len(migs) == 1, seen
    profile = next(p for p in H100.gpu_instance_profiles if p.id == MIG_PROFILE_1G10GB)
    assert migs[0]["memory_total"] == profile.memory_mib * 2**20
    start, size = placement_of(allocated_device(kind_bed, namespace, "mig"))
    assert gpu_instances(kind_bed, "gpu-mig") == [(MIG_PROFILE_1G10GB, start, size)]
    delete_pod(kind_bed, namespace, "mig", "gpu-mig")
    assert gpu_instances(kind_bed, "gpu-mig") == []


def test_static_1g10gb_is_used_as_laid_out_and_kept_after(kind_bed, namespace) -> None:
    """Static MIG: the driver publishes the instances the layout made and neither creates nor destroys any."""
    laid_out = sorted(gpu_instances(kind_bed, "gpu-static"))
    assert laid_out and {p for p, _, _ in laid_out} == {MIG_PROFILE_1G10GB}, laid_out
    template = one_1g_template(kind_bed, namespace)
    seen = run_pod(kind_bed, namespace, gpu_pod("static", kind_bed.workload_image, "gpu-static", template))
    assert "error" not in seen, seen
    migs = [m["uuid"] for d in seen["devices"] for m in d["mig_devices"]]
    _, mig = validate_state_dir(kind_bed.state_dir("gpu-static"))
    start, size = placement_of(allocated_device(kind_bed, namespace, "static"))
    (allocated,) = [ci.uuid for gi in mig.gpu_instances if (gi.start, gi.size) == (start, size)
                    for ci in mig.compute_instances if (ci.gpu, ci.gi) == (gi.gpu, gi.id)]
    assert migs == [allocated], seen
    assert sorted(gpu_instances(kind_bed, "gpu-static")) == laid_out
    delete_pod(kind_bed, namespace, "static", "gpu-static")
    assert sorted(gpu_instances(kind_bed, "gpu-static")) == laid_out


def test_two_pods_on_one_board_get_disjoint_partitions(kind_bed, namespace) -> None:
    template = one_1g_template(kind_bed, namespace)
    seen = [run_pod(kind_bed, namespace, gpu_pod(f"mig-{i}", kind_bed.workload_image, "gpu-mig", template)) for i in range(2)]
    uuids = [m["uuid"] for s in seen for d in s["devices"] for m in d["mig_devices"]]
    assert len(uuids) == 2 and len(set(uuids)) == 2, seen
    placements = [placement_of(allocated_device(kind_bed, namespace, f"mig-{i}")) for i in range(2)]
    slices = [set(range(start, start + size)) for start, size in placements]
    assert not slices[0] & slices[1], placements
    assert sorted(gpu_instances(kind_bed, "gpu-mig")) == sorted((MIG_PROFILE_1G10GB, s, n) for s, n in placements)
    for i in range(2):
        delete_pod(kind_bed, namespace, f"mig-{i}", "gpu-mig")


def test_a_pod_with_two_claims_sees_the_board_once_with_both_partitions(kind_bed, namespace) -> None:
    """containerd applies the CDI edits of both claims; the container must see both MIG devices."""
    template = one_1g_template(kind_bed, namespace)
    pod = gpu_pod("two-claims", kind_bed.workload_image, "gpu-mig", template)
    pod["spec"]["resourceClaims"] = [{"name": name, "resourceClaimTemplateName": template} for name in ("a", "b")]
    pod["spec"]["containers"][0]["resources"]["claims"] = [{"name": "a"}, {"name": "b"}]
    seen = run_pod(kind_bed, namespace, pod)
    assert "error" not in seen, seen
    assert len(seen["devices"]) == 1, seen
    _, mig = validate_state_dir(kind_bed.state_dir("gpu-mig"))
    assert sorted(m["uuid"] for m in seen["devices"][0]["mig_devices"]) == sorted(ci.uuid for ci in mig.compute_instances), seen
    assert len(mig.compute_instances) == 2
    delete_pod(kind_bed, namespace, "two-claims", "gpu-mig")


def test_a_nodes_driver_cannot_write_another_nodes_slices(kind_bed) -> None:
    """The admission policy: the driver's token on one node is refused for the other node's slices."""
    pods = kind_bed.core.list_namespaced_pod(DRIVER_NAMESPACE).items
    mine = next(p for p in pods if p.spec.node_name == kind_bed.worker("gpu-whole"))
    other = kind_bed.worker("gpu-mig")
    script = (
        "import json\n"
        "from kubernetes import client, config\n"
        "config.load_incluster_config()\n"
        "r = client.ResourceV1Api()\n"
        "def body(node):\n"
        "    return {'apiVersion': 'resource.k8s.io/v1', 'kind': 'ResourceSlice', 'metadata': {'generateName': 'probe-'},\n"
        "            'spec': {'driver': 'probe.dra-testbed.io', 'nodeName': node, 'pool': {'name': node, 'generation': 1, 'resourceSliceCount': 1}, 'devices': []}}\n"
        "for node in (%r, %r):\n"
        "    try:\n"
        "        made = r.create_resource_slice(body(node)); r.delete_resource_slice(made.metadata.name); print(node, 'allowed')\n"
        "    except client.exceptions.ApiException as e:\n"
        "        print(node, 'denied', e.status, json.loads(e.body)['message'])\n" % (mine.spec.node_name, other)
    )
    out = kind_bed.cluster.kubectl("-n", DRIVER_NAMESPACE, "exec", mine.metadata.name, "-c", "slice-publisher", "--",
                                   "python3", "-c", script).stdout.split("\n")
    assert f"{mine.spec.node_name} allowed" in out, out
    denied = next((line for line in out if line.startswith(f"{other} denied")), "")
    assert denied.startswith(f"{other} denied 403"), out
    assert f"on node {mine.spec.node_name} may not write ResourceSlices of node {other}" in denied


def driver_pod_on(bed, node: str):
    pods = bed.core.list_namespaced_pod(DRIVER_NAMESPACE).items
    return next(p for p in pods if p.spec.node_name == node and p.metadata.deletion_timestamp is None)


def test_killing_the_plugin_mid_run_loses_and_leaks_nothing(kind_bed, namespace) -> None:
    """The plugin dies while a pod holds a MIG device; its successor still unprepares it cleanly."""
    node = kind_bed.worker("gpu-mig")
    template = one_1g_template(kind_bed, namespace)
    seen = run_pod(kind_bed, namespace, gpu_pod("survivor", kind_bed.workload_image, "gpu-mig", template))
    assert len([m for d in seen["devices"] for m in d["mig_devices"]]) == 1
    old = driver_pod_on(kind_bed, node)
    kind_bed.core.delete_namespaced_pod(old.metadata.name, DRIVER_NAMESPACE, grace_period_seconds=0)
    wait_for(kind_bed.core.list_namespaced_pod,
             lambda p: p.spec.node_name == node and p.metadata.name != old.metadata.name and p.status.phase == "Running"
             and all(c.ready for c in (p.status.container_statuses or [])),
             namespace=DRIVER_NAMESPACE, what="a new driver pod on the node", timeout=120)
    # the pod kept its device across the plugin's death
    assert len(gpu_instances(kind_bed, "gpu-mig")) == 1
    delete_pod(kind_bed, namespace, "survivor", "gpu-mig")
    assert gpu_instances(kind_bed, "gpu-mig") == []
    assert cdi_specs(kind_bed, "gpu-mig") == []


@pytest.fixture
def faulty_driver(kind_bed):
    """Redeploys the driver with the fault switches given to the returned function; restores it after. Each
    redeploy takes most of a minute: these rows run with the full fault matrix (`nox -s conformance`,
    $DRA_TESTBED_CONFORMANCE_MATRIX=full); `nox -s tests` sees a kind fault caught in the matrix's cdi-all-devices row."""
    from fake_gpus.driver.faults import fault_env
    from fake_gpus.nvml.state import reset_state_dir
    from testbed.clusters.driver import DriverSpec

    if os.environ.get("DRA_TESTBED_CONFORMANCE_MATRIX") != "full":
        pytest.skip("kind driver faults run with the full fault matrix: nox -s conformance")  # allowed in suites/skips.yaml
    yield lambda *faults: kind_bed.cluster.deploy_driver(DriverSpec(env=fault_env(faults)))
    kind_bed.cluster.deploy_driver(DriverSpec())
    reset_state_dir(kind_bed.state_dir("gpu-mig"))  # whatever a fault left behind


def test_fault_unprepare_leaks_is_caught(kind_bed, namespace, faulty_driver) -> None:
    faulty_driver("unprepare-leaks")
    template = one_1g_template(kind_bed, namespace)
    run_pod(kind_bed, namespace, gpu_pod("leaky", kind_bed.workload_image, "gpu-mig", template))
    delete_pod(kind_bed, namespace, "leaky", "gpu-mig")
    # what test_dynamic_1g10gb_exists_while_the_pod_runs_and_not_after asserts empty
    assert len(gpu_instances(kind_bed, "gpu-mig")) == 1


def test_fault_prepare_fails_is_caught(kind_bed, namespace, faulty_driver) -> None:
    faulty_driver("prepare-fails")
    kind_bed.resource.create_namespaced_resource_claim_template(
        namespace, claim_template("one-h100", IDENTITY.gpu_class, "true"))
    with pytest.raises(AssertionError):  # run_pod's wait times out: the pod never runs
        kind_bed.core.create_namespaced_pod(namespace, gpu_pod("doomed", kind_bed.workload_image, "gpu-whole", "one-h100"))
        wait_for(kind_bed.core.list_namespaced_pod, lambda p: p.status.phase == "Running", name="doomed", namespace=namespace,
                 what="pod doomed to run", timeout=30)
    events = kind_bed.core.list_namespaced_event(namespace, field_selector="involvedObject.name=doomed").items
    assert any("prepare" in (e.message or "").lower() for e in events), [e.message for e in events]


def test_slices_deleted_behind_the_drivers_back_are_published_again(kind_bed) -> None:
    """The kubelet deletes a driver's slices 30 s after its plugin went away (a restart can race it into
    doing so while the new plugin runs); the node's publisher must notice and publish them again."""
    node = kind_bed.worker("gpu-whole")

    def mine():
        return [s for s in kind_bed.resource.list_resource_slice(field_selector=f"spec.nodeName={node}").items
                if s.spec.driver == IDENTITY.driver]

    before = mine()
    assert before
    for s in before:
        kind_bed.resource.delete_resource_slice(s.metadata.name)
    deadline = time.monotonic() + 60
    while not mine():
        assert time.monotonic() < deadline, f"the slices of {node} were not published again within 60 s"
        time.sleep(1)
    assert sum(len(s.spec.devices or []) for s in mine()) == sum(len(s.spec.devices or []) for s in before)


def _plugin_ready(pod) -> bool | None:
    return next((c.ready for c in (pod.status.container_statuses or []) if c.name == "kubelet-plugin"), None)


def test_a_plugin_whose_socket_is_gone_is_not_ready(kind_bed) -> None:
    """The DaemonSet's readiness probe means the kubelet can use the plugin: remove its DRA socket from the
    node and the pod turns NotReady (the probe says why) while the process keeps running; a new pod is Ready."""
    from testbed.host.docker.dockerd import docker

    node = kind_bed.worker("gpu-whole")
    old = wait_for(kind_bed.core.list_namespaced_pod, lambda p: p.spec.node_name == node and _plugin_ready(p) is True,
                   namespace=DRIVER_NAMESPACE, what="a Ready driver pod on the node", timeout=120)
    docker("exec", node, "rm", f"/var/lib/kubelet/plugins/{IDENTITY.driver}/dra.sock")
    wait_for(kind_bed.core.list_namespaced_pod, lambda p: p.metadata.name == old.metadata.name and _plugin_ready(p) is False,
             namespace=DRIVER_NAMESPACE, what="the driver pod NotReady without its socket", timeout=90)
    events = kind_bed.core.list_namespaced_event(DRIVER_NAMESPACE, field_selector=f"involvedObject.name={old.metadata.name}").items
    assert any("Readiness probe failed" in (e.message or "") for e in events), [e.message for e in events]
    kind_bed.core.delete_namespaced_pod(old.metadata.name, DRIVER_NAMESPACE, grace_period_seconds=0)
    wait_for(kind_bed.core.list_namespaced_pod,
             lambda p: p.spec.node_name == node and p.metadata.name != old.metadata.name and _plugin_ready(p) is True,
             namespace=DRIVER_NAMESPACE, what="a new Ready driver pod on the node", timeout=180)
