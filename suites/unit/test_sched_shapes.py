"""benchmarks/sched_shapes.py: scheduler_perf's DRA feature workloads resized, and the same shapes for our bed,
checked without a cluster."""

from __future__ import annotations

import importlib.util
import itertools
import sys
from pathlib import Path

import pytest
import yaml

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"

# an upstream-like config: a fast workload with a literal measured count, gates to keep and one to drop
CONFIG = """
- name: FirstAvailable
  featureGates: {DynamicResourceAllocation: true, DRAPrioritizedList: true}
  workloadTemplate:
  - {opcode: createNodes, countParam: $nodesWithDRA}
  - {opcode: createAny, templatePath: ../templates/resourceslice-basic-devices.yaml, templateParams: {numDevices: 10}}
  - {opcode: createPods, namespace: test, count: 10, podTemplatePath: ../templates/pod.yaml, collectMetrics: true}
  workloads:
  - name: fast
    featureGates: {SchedulerQueueingHints: false, DRAResourceClaimDeviceStatus: true}
    labels: [integration-test, short]
    params: {nodesWithDRA: 1, nodesWithoutDRA: 1, initClaims: 0, maxClaimsPerNode: 10}
- name: Other
  workloadTemplate: []
  workloads: [{name: fast, params: {nodesWithDRA: 1, resourceSlices: 1, measurePods: 1}}]
"""


@pytest.fixture(scope="module")
def shapes():
    """benchmarks/sched_shapes.py as a module (the benchmarks are scripts, not a package)."""
    spec = importlib.util.spec_from_file_location("sched_shapes", BENCHMARKS / "sched_shapes.py")
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["sched_shapes"] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def test_upstream_config_keeps_the_case_and_adds_the_named_workload_resized(shapes) -> None:
    size = shapes.Size(nodes=20, devices=4, init=30, measured=50)
    text, params = shapes.upstream_config(CONFIG, "FirstAvailable", "fast", size)
    (case,) = yaml.safe_load(text)
    assert case["name"] == "FirstAvailable" and case["featureGates"]["DRAPrioritizedList"] is True
    (workload,) = case["workloads"]
    assert workload["name"] == shapes.OUR_WORKLOAD and workload["labels"] == ["performance"]
    assert params == workload["params"] == {"nodesWithDRA": 20, "nodesWithoutDRA": 0, "initClaims": 30,
                                            "maxClaimsPerNode": 4, "measurePods": 50}
    # queueing hints at the release's default, as our scheduler runs; the other gate of the workload stays
    assert workload["featureGates"] == {"DRAResourceClaimDeviceStatus": True}
    assert case["workloadTemplate"][1]["templateParams"] == {"numDevices": 4}  # 1.37 says devices per node so
    measured = case["workloadTemplate"][2]
    assert "count" not in measured and measured["countParam"] == "$measurePods"
    assert shapes.bench_pattern("FirstAvailable") == f"BenchmarkPerfScheduling/FirstAvailable/{shapes.OUR_WORKLOAD}$"


def test_a_workload_without_init_params_runs_no_init_pods_on_either_side(shapes) -> None:
    size = shapes.Size(nodes=20, devices=4, init=30, measured=50)
    _, params = shapes.upstream_config(CONFIG, "Other", "fast", size, lambda s: s.init + s.measured)
    assert params == {"nodesWithDRA": 20, "resourceSlices": 50, "measurePods": 50}  # pools for the measured only
    assert shapes.measured_size(params, size) == shapes.Size(20, 4, 0, 50)
    _, params = shapes.upstream_config(CONFIG, "FirstAvailable", "fast", size)
    assert shapes.measured_size(params, size) == size


def test_upstream_config_names_what_exists_when_asked_for_what_does_not(shapes) -> None:
    size = shapes.Size(1, 1, 0, 1)
    with pytest.raises(shapes.ShapeError, match="test cases: FirstAvailable, Other"):
        shapes.upstream_config(CONFIG, "Partitionable", "fast", size)
    with pytest.raises(shapes.ShapeError, match="workloads: fast"):
        shapes.upstream_config(CONFIG, "FirstAvailable", "2000pods_100nodes", size)


def test_a_size_the_devices_cannot_hold_is_refused(shapes) -> None:
    taints = shapes.feature("device-taints")
    taints.check(shapes.Size(nodes=10, devices=8, init=40, measured=40))
    with pytest.raises(shapes.ShapeError, match="10 nodes x 8 devices have 80"):
        taints.check(shapes.Size(nodes=10, devices=8, init=41, measured=40))
    with pytest.raises(shapes.ShapeError, match="give 1 to 8"):
        taints.check(shapes.Size(nodes=10, devices=9, init=0, measured=1))
    with pytest.raises(shapes.ShapeError, match="features: device-taints"):
        shapes.feature("taints")
    with pytest.raises(shapes.ShapeError, match="minors: 1.35, 1.36, 1.37"):
        shapes.feature("extended-resource").workload("1.34")


def _shape(shapes, name: str, size):
    chosen = shapes.feature(name)
    return chosen.ours(size, shapes.resized_params({"resourceSlices": 1, "classes": 25}, size, chosen.pools(size)))


def test_device_taints_every_device_is_tainted_and_every_claim_tolerates_it(shapes) -> None:
    shape = _shape(shapes, "device-taints", shapes.Size(2, 8, 0, 16))
    (rule,) = shape.objects
    assert rule["kind"] == "DeviceTaintRule" and "deviceSelector" not in rule["spec"]  # no selector: all devices
    (request,) = shape.template["spec"]["spec"]["devices"]["requests"]
    (toleration,) = request["exactly"]["tolerations"]
    assert toleration == {"key": rule["spec"]["taint"]["key"], "operator": "Exists"}
    assert request["exactly"]["deviceClassName"] == "gpu.nvidia.com"


def test_prioritized_list_the_first_choice_matches_no_device_the_second_ours(shapes) -> None:
    shape = _shape(shapes, "prioritized-list", shapes.Size(2, 8, 4, 12))
    (nothing,) = shape.objects
    (request,) = shape.template["spec"]["spec"]["devices"]["requests"]
    first, second = request["firstAvailable"]
    assert first["deviceClassName"] == nothing["metadata"]["name"]
    assert "gpu.nvidia.com" not in nothing["spec"]["selectors"][0]["cel"]["expression"]
    assert second["deviceClassName"] == "gpu.nvidia.com"
    # init claims ask for the device outright, as upstream's resourceclaim.yaml
    assert shape.init_template["spec"]["spec"]["devices"]["requests"] == [
        {"name": "req-0", "exactly": {"deviceClassName": "gpu.nvidia.com"}}]


def test_extended_resource_every_pod_asks_for_a_resource_a_class_names(shapes) -> None:
    shape = _shape(shapes, "extended-resource", shapes.Size(10, 8, 0, 60))
    named = {c["spec"]["extendedResourceName"] for c in shape.objects}
    assert len(named) == 25
    asked = {name for i in range(60) for name in shape.pod(i)["spec"]["containers"][0]["resources"]["requests"]}
    assert asked == named  # 60 pods round the 25 classes
    assert shape.template is None and "resourceClaims" not in shape.pod(0)["spec"]


def _counters_left(counter_set: dict, devices: list[dict]) -> dict[str, int] | None:
    """What `devices` leave of the counter set, or None when they need more than it has."""
    left = {name: int(c["value"]) for name, c in counter_set["counters"].items()}
    for device in devices:
        for name, c in device["consumesCounters"][0]["counters"].items():
            left[name] -= int(c["value"])
    return left if min(left.values()) >= 0 else None


def test_partitionable_after_an_init_claim_a_pool_holds_one_measured_claim_found_by_backtracking(shapes) -> None:
    size = shapes.Size(4, 8, 3, 5)
    shape = _shape(shapes, "partitionable-devices", size)
    slices = [o for o in shape.objects if o["kind"] == "ResourceSlice"]
    assert len(slices) == 2 * shapes.feature("partitionable-devices").pools(size) == 10
    counter_set = slices[0]["spec"]["sharedCounters"][0]
    devices = slices[1]["spec"]["devices"]
    assert slices[1]["spec"]["pool"] == slices[0]["spec"]["pool"] == {"name": "resourceslice-0", "generation": 1,
                                                                       "resourceSliceCount": 2}
    # the init claim's selector: two counters' capacity and preallocate
    (init,) = [d for d in devices if d["attributes"]["preallocate"]["bool"] and d["capacity"]["counters"]["value"] == "2"]
    rest = [d for d in devices if d is not init]
    pairs = [p for p in itertools.combinations(rest, 2) if _counters_left(counter_set, [init, *p]) is not None]
    # the other two-counter device fits no pair: the allocator tries it first and has to back out of it
    assert [sorted(d["name"] for d in p) for p in pairs] == [["device-1-counter-3", "device-1-counter-4"]]
    measured = shape.template["spec"]["spec"]["devices"]
    assert measured["requests"][0]["exactly"]["count"] == 2
    assert measured["constraints"] == [{"requests": ["req-0"], "matchAttribute": "dra.example.com/slice"}]
    assert {d["attributes"]["dra.example.com/slice"]["int"] for d in devices} == {0}


def test_consumable_capacity_one_claim_fills_one_shareable_device(shapes) -> None:
    size = shapes.Size(4, 8, 3, 5)
    shape = _shape(shapes, "consumable-capacity", size)
    slices = [o for o in shape.objects if o["kind"] == "ResourceSlice"]
    assert len(slices) == shapes.feature("consumable-capacity").pools(size) == 8  # one pool per pod
    (device,) = slices[0]["spec"]["devices"]
    assert device["allowMultipleAllocations"] is True
    taken = sum(int(r["exactly"]["capacity"]["requests"]["memory"].removesuffix("Gi"))
                for r in shape.template["spec"]["spec"]["devices"]["requests"])
    assert taken == int(device["capacity"]["memory"]["value"].removesuffix("Gi"))  # 2 x 40Gi of 80Gi


def test_api_paths(shapes) -> None:
    template = shapes.claim_template([shapes.one_device("c")])
    assert shapes.api_path(template, "test") == "/apis/resource.k8s.io/v1/namespaces/test/resourceclaimtemplates"
    assert shapes.api_path(shapes.device_class("c", "true")) == "/apis/resource.k8s.io/v1/deviceclasses"
