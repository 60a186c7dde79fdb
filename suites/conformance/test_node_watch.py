"""node.generated's judgement of the node side on hand-made views and allocations (no cluster): what a
monitoring view must show against what is allocated, what a container must see, and the explicit opening."""

from __future__ import annotations

from collections import Counter
from types import SimpleNamespace

import pytest

from testbed.clusters.layout import load_layout
from testbed.cli.conformance import DEFAULT_KIND_LAYOUT
from testbed.conformance.generated import opening
from testbed.conformance.node_watch import allocated_partitions, instance_problems, monitor_pod
from testbed.conformance.workload_pods import view_mismatch
from testbed.workloads.devices import DeviceId, Inventory
from testbed.workloads.model import PLACEHOLDER_IMAGE
from testbed.workloads.observe import ObservedClaim, Snapshot
from testbed.workloads.oracle import Result
from testbed.workloads.steps import Arrive, Depart

DRIVER = "gpu.nvidia.com"
GPU = "GPU-aaaa"
SUBJECT = SimpleNamespace(driver=DRIVER, gpu_class="gpu.nvidia.com", mig_class="mig.nvidia.com", workload_image="img:1",
                          driver_root="/var/lib/x/driver-root", layout=load_layout(str(DEFAULT_KIND_LAYOUT)))


def _string(value: str) -> dict:
    return {"string": value}


def _published(name: str, kind: str, **attrs: str) -> dict:
    return {"name": name, "attributes": {"type": _string(kind), **{k: _string(v) for k, v in attrs.items()}}}


GPU0 = _published("gpu-0", "gpu", uuid=GPU)
MIG_A = _published("gpu-0-mig-1g10gb-19-0", "mig", parentUUID=GPU, profile="1g.10gb")
MIG_B = _published("gpu-0-mig-2g20gb-14-2", "mig", parentUUID=GPU, profile="2g.20gb")


def _view(*migs: str, instances: int | None = None, whole: tuple[str, ...] = ()) -> dict:
    """An NVML report: GPU with MIG devices of `migs` profiles (and `instances` GPU instances), plus whole GPUs."""
    devices = [{"uuid": u, "mig_devices": [], "gpu_instances": []} for u in whole]
    if migs or instances:
        names = [{"uuid": f"MIG-{i}", "name": f"NVIDIA H100 80GB HBM3 MIG {p}"} for i, p in enumerate(migs)]
        devices.append({"uuid": GPU, "mig_devices": names, "gpu_instances": [{}] * (len(migs) if instances is None else instances)})
    return {"devices": devices}


def test_a_monitoring_view_must_show_exactly_the_running_partitions() -> None:
    must = may = Counter({(GPU, "1g.10gb"): 1})
    assert instance_problems(_view("1g.10gb"), must, may) == []
    assert "missing" in instance_problems(_view(), must, may)[0]
    assert "no allocation holds" in instance_problems(_view("1g.10gb", "2g.20gb"), must, may)[0]
    # a GPU instance left without its compute instance: no MIG device, yet it holds slices
    assert "without a compute instance" in instance_problems(_view("1g.10gb", instances=2), must, may)[0]
    assert "NVML failed" in instance_problems({"error": "nvmlInit: Library Not Found"}, must, may)[0]
    # one that may exist (freed, not yet unprepared; or admin access) is no finding either way
    assert instance_problems(_view("1g.10gb", "2g.20gb"), must, may + Counter({(GPU, "2g.20gb"): 1})) == []


def test_partitions_of_running_pods_must_exist_the_others_may() -> None:
    inventory = Inventory.from_slices([{"spec": {"driver": DRIVER, "pool": {"name": "n1"}, "nodeName": "n1",
                                                 "devices": [GPU0, MIG_A, MIG_B]}}])
    held = ObservedClaim("ns", "held", "n1", [Result("r", DeviceId(DRIVER, "n1", MIG_A["name"]))], [], ["p1"])
    freed = ObservedClaim("ns", "freed", "n1", [Result("r", DeviceId(DRIVER, "n1", MIG_B["name"]))], [], [])
    admin = ObservedClaim("ns", "admin", "n1", [Result("r", DeviceId(DRIVER, "n1", MIG_B["name"]), admin=True)], [], ["p2"])
    must, may = allocated_partitions(Snapshot(inventory, [held, freed, admin]), "n1", {"ns/p1", "ns/p2"})
    assert must == Counter({(GPU, "1g.10gb"): 1})
    assert may == Counter({(GPU, "1g.10gb"): 1, (GPU, "2g.20gb"): 2})
    assert allocated_partitions(Snapshot(inventory, [held]), "other", {"ns/p1"}) == (Counter(), Counter())


@pytest.mark.parametrize("report, devices, wrong", [
    (_view(whole=(GPU,)), [GPU0], False),
    (_view(whole=(GPU, "GPU-bbbb")), [GPU0], True),  # every GPU of the node (cdi-all-devices)
    (_view(whole=("GPU-bbbb",)), [GPU0], True),  # another GPU (cdi-wrong-device)
    (_view("1g.10gb"), [MIG_A], False),
    (_view("2g.20gb"), [MIG_A], True),  # another profile (or one published under another name)
    (_view("1g.10gb"), [{**MIG_A, "attributes": {**MIG_A["attributes"], "parentUUID": _string("GPU-other")}}], True),
    (_view(whole=(GPU,)), [MIG_A], True),  # the parent whole instead of its MIG device
    ({"error": "nvmlInit: NVML Shared Library Not Found"}, [], False),  # a container holding nothing
    ({"error": "nvmlInit: NVML Shared Library Not Found"}, [GPU0], True),
])
def test_a_container_must_see_exactly_its_devices(report: dict, devices: list, wrong: bool) -> None:
    assert (view_mismatch(SUBJECT, report, devices) is not None) is wrong


def test_the_opening_holds_one_device_per_node_and_admin_access_beside_a_held_gpu() -> None:
    steps = opening(SUBJECT)
    arrivals = [s.pod for s in steps if isinstance(s, Arrive)]
    assert [s.pod for s in steps if isinstance(s, Depart)] == [p.name for p in arrivals]
    assert {p.node for p in arrivals} == {n.name for n in SUBJECT.layout.nodes}
    bodies = {p.name: p.claims[0].template.body(DRIVER)["devices"]["requests"][0]["exactly"] for p in arrivals}
    admin = [b for b in bodies.values() if b.get("adminAccess")]
    assert len(admin) == 1 and admin[0]["allocationMode"] == "All" and admin[0]["deviceClassName"] == SUBJECT.gpu_class
    assert sum(b["deviceClassName"] == SUBJECT.mig_class for b in bodies.values()) == 3  # two on the dynamic node, one static


def test_pods_on_real_kubelets_run_the_given_image_and_the_monitor_reads_the_driver_root() -> None:
    pod = opening(SUBJECT)[0].pod
    kwok = pod.manifests(DRIVER)[-1]["spec"]["containers"][0]
    real = pod.manifests(DRIVER, "img:1", ("--sleep",))[-1]["spec"]["containers"][0]
    assert kwok["image"] == PLACEHOLDER_IMAGE and "args" not in kwok
    assert real["image"] == "img:1" and real["args"] == ["--sleep"] and real["imagePullPolicy"] == "IfNotPresent"
    monitor = monitor_pod(SUBJECT, "n1")["spec"]
    assert monitor["containers"][0]["securityContext"]["privileged"] and "resourceClaims" not in monitor
    assert monitor["volumes"][0]["hostPath"]["path"] == SUBJECT.driver_root
