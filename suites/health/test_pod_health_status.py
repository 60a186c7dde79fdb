"""Unit checks of resource health without a cluster: which devices the plugin's stream calls unhealthy (from the
health monitor's taints by scope) and the allocatedResourcesStatus the stand-in kubelet writes from it."""

from __future__ import annotations

from fake_gpus.driver.health import NODE, Taint, gpu_scope
from fake_gpus.driver.kubeletplugin.health_stream import is_unhealthy
from testbed.kubelet.health import PreparedDevice, container_statuses, differs, minor_with_field, writes_health

UUID = "GPU-1"
MIG = "gpu-1-mig-1g10gb-19-0"
XID_79 = Taint("gpu.nvidia.com/xid", "79", "NoSchedule")
XID_13 = Taint("gpu.nvidia.com/xid", "13", "None")
LOST = Taint("gpu.nvidia.com/gpu-lost", None, "NoSchedule")


def test_a_fatal_taint_on_the_whole_gpu_makes_its_mig_devices_unhealthy_too() -> None:
    taints = {"gpu-1": (XID_79,)}
    assert is_unhealthy("gpu-1", UUID, taints) and is_unhealthy(MIG, UUID, taints)
    assert not is_unhealthy("gpu-0", "GPU-0", taints) and not is_unhealthy("gpu-0-mig-1g10gb-19-0", "GPU-0", taints)


def test_a_mig_device_of_its_own_and_gpu_wide_and_node_wide_scopes() -> None:
    assert is_unhealthy(MIG, UUID, {MIG: (XID_79,)}) and not is_unhealthy("gpu-1", UUID, {MIG: (XID_79,)})
    assert is_unhealthy("gpu-1", UUID, {gpu_scope(UUID): (XID_79,)}) and is_unhealthy(MIG, UUID, {gpu_scope(UUID): (XID_79,)})
    assert is_unhealthy("gpu-0", "GPU-0", {NODE: (LOST,)})


def test_taints_of_effect_none_leave_a_device_healthy() -> None:
    assert not is_unhealthy("gpu-1", UUID, {"gpu-1": (XID_13,), NODE: (Taint("gpu.nvidia.com/unmonitored", None, "None"),)})


def _pod(claim_status: str | None = "trainer-gpu-x") -> dict:
    return {"spec": {"containers": [{"name": "c", "resources": {"claims": [{"name": "gpu", "request": "g"}]}},
                                    {"name": "sidecar"}]},
            "status": {"resourceClaimStatuses": [{"name": "gpu", "resourceClaimName": claim_status}] if claim_status else [],
                       "containerStatuses": [{"name": "c", "ready": True}, {"name": "sidecar", "ready": True}]}}


DEVICES = {"trainer-gpu-x": [PreparedDevice("node-a", "gpu-1", ("k8s.gpu.nvidia.com/device=uid-gpu-1",)),
                             PreparedDevice("node-a", "gpu-0", ())]}


def test_the_kubelets_shape_names_the_pod_claim_and_request_and_lists_every_device() -> None:
    health = {("node-a", "gpu-1"): "Unhealthy"}
    statuses = container_statuses(_pod(), DEVICES.get, "gpu.nvidia.com", lambda pool, d: health.get((pool, d), "Unknown"))
    assert statuses[0]["allocatedResourcesStatus"] == [{"name": "claim:gpu/g", "resources": [
        {"resourceID": "k8s.gpu.nvidia.com/device=uid-gpu-1", "health": "Unhealthy"},
        {"resourceID": "gpu.nvidia.com/node-a/gpu-0", "health": "Unknown"}]}]
    assert statuses[1] == {"name": "sidecar", "ready": True}, "a container without claims is left as it is"
    assert differs(_pod()["status"]["containerStatuses"], statuses)
    assert not differs(statuses, [dict(s) for s in reversed(statuses)][::-1])


def test_a_claim_not_named_in_the_pods_status_gets_no_entry_as_in_the_kubelet() -> None:
    # the kubelet finds a claim's name only in status.resourceClaimStatuses: a pod naming its ResourceClaim directly gets none
    statuses = container_statuses(_pod(claim_status=None), DEVICES.get, "gpu.nvidia.com", lambda pool, d: "Healthy")
    assert "allocatedResourcesStatus" not in statuses[0]


def test_the_field_is_written_from_136() -> None:
    assert [writes_health(m) for m in ("1.34", "1.35", "1.36", "1.37")] == [False, False, True, True]


def test_a_bed_that_shows_the_field_is_of_136_or_later() -> None:
    assert [minor_with_field(m) for m in ("1.34", "1.36", "1.37")] == ["1.36", "1.36", "1.37"]
