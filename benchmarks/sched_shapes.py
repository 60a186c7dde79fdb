"""The DRA feature workloads of Kubernetes' scheduler_perf (test/integration/scheduler_perf/dra/<feature>/
performance-config.yaml with the templates in ../templates) and the same shapes built for our bed.

Pure: no cluster, no network. benchmarks/sched_features.py runs both sides; suites/unit/test_sched_shapes.py
checks the shapes. Each feature names, per minor, the test case and its smallest named workload of
scheduler_perf whose size can be measured (the "fast" ones where that is all there is: 1-10 pods, too few for a
one-second throughput sample, so both sides run the shape at a size given here, upstream through a workload this
module adds to a copy of the upstream config, with the named workload's params and only the size params changed).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, replace
from typing import Any, Callable

import yaml

from fake_gpus.driver.identity import DEFAULT_DRIVER
from fake_gpus.node import MODE_LABEL

# the name of the workload added to a copy of upstream's config (its params: the named one's, resized)
OUR_WORKLOAD = "dra_testbed"
PUBLISHED = "published by our publisher"
PRE_CREATED = "pre-created by the benchmark (upstream's slice templates; the publisher runs beside them)"
# the pre-created slices keep upstream's driver name: its CEL expressions and attribute domains name it
TEST_DRIVER = "test-driver.cdi.k8s.io"
TEMPLATE_NAME = "test-claim-template"  # upstream's pod-with-claim-template.yaml refers to this name
PAUSE = "registry.k8s.io/pause:3.10.1"
MAX_WHOLE_GPUS = 8  # a node of ours has at most 8 whole GPUs
INIT_PARAMS = {"initPods", "initClaims"}  # upstream's params for what is scheduled or allocated before measuring


class ShapeError(ValueError):
    """A feature, minor or size this module has no shape for."""


@dataclass(frozen=True)
class Size:
    """How big a run is: `nodes` with `devices` each, `init` pods scheduled first (not measured), `measured` pods."""

    nodes: int
    devices: int
    init: int
    measured: int

    def check(self) -> None:
        if self.nodes < 1 or self.measured < 1 or self.init < 0:
            raise ShapeError(f"size {self}: give nodes >= 1, measured pods >= 1, init pods >= 0")
        if not 1 <= self.devices <= MAX_WHOLE_GPUS:
            raise ShapeError(f"{self.devices} devices per node: give 1 to {MAX_WHOLE_GPUS} (whole GPUs of one node)")


@dataclass(frozen=True)
class OurShape:
    """What our bed gets for a feature: cluster-scoped objects first (classes, taint rules, slices), then in each
    of the init and measured namespaces `template` (a ResourceClaimTemplate, or None) and pods `pod(i)`; the
    init namespace uses `init_template` where the upstream init claims differ from the measured ones."""

    objects: list[dict[str, Any]]
    template: dict[str, Any] | None
    pod: Callable[[int], dict[str, Any]]
    init_template: dict[str, Any] | None = None


@dataclass(frozen=True)
class Feature:
    """One scheduler_perf DRA feature package and how our bed builds the same shape."""

    name: str
    package: str  # the folder under test/integration/scheduler_perf/dra
    workloads: dict[str, tuple[str, str]]  # minor -> (test case, named workload)
    slices: str  # PUBLISHED or PRE_CREATED
    ours: Callable[[Size, dict[str, Any]], OurShape]  # (size, the resized upstream params) -> our objects
    # how many pools of pre-created slices a size needs (upstream's resourceSlices param)
    pools: Callable[[Size], int] = lambda size: 0

    def check(self, size: Size) -> None:
        """ShapeError when the devices of `size` cannot hold all its pods (they would wait forever)."""
        size.check()
        if self.slices == PUBLISHED and size.nodes * size.devices < size.init + size.measured:
            raise ShapeError(f"{size.init} + {size.measured} pods need as many devices; {size.nodes} nodes x "
                             f"{size.devices} devices have {size.nodes * size.devices}: give more nodes or fewer pods")

    def workload(self, minor: str) -> tuple[str, str]:
        if minor not in self.workloads:
            raise ShapeError(f"feature {self.name} has no scheduler_perf workload for {minor}; "
                             f"minors: {', '.join(sorted(self.workloads))}")
        return self.workloads[minor]


# ----------------------------------------------------------------------------- objects
def _resource(kind: str, name: str, spec: dict[str, Any], version: str = "resource.k8s.io/v1") -> dict[str, Any]:
    return {"apiVersion": version, "kind": kind, "metadata": {"name": name}, "spec": spec}


def device_class(name: str, expression: str, **extra: Any) -> dict[str, Any]:
    """A DeviceClass selecting devices by one CEL `expression` (extra spec fields, e.g. extendedResourceName)."""
    return _resource("DeviceClass", name, {"selectors": [{"cel": {"expression": expression}}], **extra})


def claim_template(requests: list[dict[str, Any]], constraints: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """upstream's test-claim-template with these device `requests`."""
    devices: dict[str, Any] = {"requests": requests, **({"constraints": constraints} if constraints else {})}
    return _resource("ResourceClaimTemplate", TEMPLATE_NAME, {"spec": {"devices": devices}})


def one_device(device_class_name: str, **extra: Any) -> dict[str, Any]:
    """Request req-0: exactly one device of the class (extra fields: tolerations, selectors, count...)."""
    return {"name": "req-0", "exactly": {"deviceClassName": device_class_name, **extra}}


def claim_pod(i: int) -> dict[str, Any]:
    """upstream's pod-with-claim-template.yaml: a pause container using a claim from test-claim-template."""
    return {"metadata": {"name": f"test-dra-{i}"}, "spec": {
        "containers": [{"name": "pause", "image": PAUSE, "resources": {"claims": [{"name": "resource"}]}}],
        "resourceClaims": [{"name": "resource", "resourceClaimTemplateName": TEMPLATE_NAME}]}}


def extended_resource_pod(classes: int) -> Callable[[int], dict[str, Any]]:
    """upstream's pod-with-extended-resource(-modN).yaml: pod i asks for one example.com/gpu-<i mod classes>."""
    def pod(i: int) -> dict[str, Any]:
        amount = {f"example.com/gpu-{i % classes}": "1"}
        return {"metadata": {"name": f"test-dra-{i}"}, "spec": {"containers": [
            {"name": "pause", "image": PAUSE, "resources": {"requests": amount, "limits": amount}}]}}
    return pod


def pre_created_pool(index: int, devices: list[dict[str, Any]], counters: list[dict[str, Any]] | None = None,
                     ) -> list[dict[str, Any]]:
    """One pool of upstream's pre-created slices, `resourceslice-<index>`, reachable from every node of ours (upstream:
    from every node labelled node-with-dra): a counter-set slice and a device slice, or one device slice."""
    selector = {"nodeSelectorTerms": [{"matchExpressions": [{"key": MODE_LABEL, "operator": "Exists"}]}]}
    pool = {"name": f"resourceslice-{index}", "generation": 1, "resourceSliceCount": 2 if counters else 1}
    base = {"pool": pool, "driver": TEST_DRIVER, "nodeSelector": selector}
    slices = [_resource("ResourceSlice", f"resourceslice-countersets-{index}", {**base, "sharedCounters": counters})] \
        if counters else []
    return slices + [_resource("ResourceSlice", f"resourceslice-devices-{index}" if counters else f"resourceslice-{index}",
                               {**base, "devices": devices})]


# ----------------------------------------------------------------------------- features
def _device_taints(size: Size, params: dict[str, Any]) -> OurShape:
    # upstream's devicetaintrule.yaml: no selector, every device tainted NoSchedule; the claims tolerate it. The
    # rule's apiVersion is the served one, set by the benchmark (v1alpha3 in 1.34/1.35).
    rule = {"apiVersion": "resource.k8s.io/v1alpha3", "kind": "DeviceTaintRule", "metadata": {"name": "taint-all-devices"},
            "spec": {"taint": {"key": "example.com/taint", "value": "tainted", "effect": "NoSchedule"}}}
    toleration = [{"key": "example.com/taint", "operator": "Exists"}]
    return OurShape([rule], claim_template([one_device(DEFAULT_DRIVER, tolerations=toleration)]), claim_pod)


def _prioritized_list(size: Size, params: dict[str, Any]) -> OurShape:
    # upstream's resourceclaimtemplate-first-available.yaml: a first choice no device matches, then the real class
    nothing = device_class("no-devices-class", 'device.driver == "no-such-driver.cdi.k8s.io"')
    first_available = {"name": "req-0", "firstAvailable": [{"name": "sub-0", "deviceClassName": "no-devices-class"},
                                                           {"name": "sub-1", "deviceClassName": DEFAULT_DRIVER}]}
    # upstream's init claims (resourceclaim.yaml) ask for one device of the class outright
    return OurShape([nothing], claim_template([first_available]), claim_pod,
                    init_template=claim_template([one_device(DEFAULT_DRIVER)]))


def _extended_resource(size: Size, params: dict[str, Any]) -> OurShape:
    classes = int(params.get("classes", 1))
    objects = [device_class(f"test-class-{i}", f'device.driver == "{DEFAULT_DRIVER}"',
                            extendedResourceName=f"example.com/gpu-{i}") for i in range(classes)]
    return OurShape(objects, None, extended_resource_pod(classes))


def _partitionable(size: Size, params: dict[str, Any]) -> OurShape:
    # upstream's resourceslice-partitionable-{countersets,devices}.yaml: four counters of 1; two devices taking two
    # counters each, four taking one. An init claim (with a selector) takes a preallocated two-counter device, so a
    # measured claim for two devices of one slice has to skip the other two-counter device: one backtrack.
    counters = [{"name": "counter-set", "counters": {f"counter{c}": {"value": "1"} for c in range(1, 5)}}]

    def device(name: str, uses: list[int], preallocate: bool, index: int) -> dict[str, Any]:
        return {"name": name, "attributes": {"preallocate": {"bool": preallocate}, "dra.example.com/slice": {"int": index}},
                "capacity": {"counters": {"value": str(len(uses))}},
                "consumesCounters": [{"counterSet": "counter-set",
                                      "counters": {f"counter{c}": {"value": "1"} for c in uses}}]}

    objects = [device_class("test-class", f'device.driver == "{TEST_DRIVER}"')]
    for i in range(int(params["resourceSlices"])):
        devices = [device("device-2-counters-1", [1, 2], True, i), device("device-2-counters-2", [3, 4], False, i)]
        devices += [device(f"device-1-counter-{c}", [c], False, i) for c in range(1, 5)]
        objects += pre_created_pool(i, devices, counters)
    selector = (f"device.capacity['{TEST_DRIVER}'].counters.compareTo(quantity('2')) >= 0 && "
                f"device.attributes['{TEST_DRIVER}'].preallocate")
    measured = claim_template([one_device("test-class", count=2)],
                              [{"requests": ["req-0"], "matchAttribute": "dra.example.com/slice"}])
    # upstream allocates its init claims directly (allocResourceClaims); ours schedule init pods with such claims
    return OurShape(objects, measured, claim_pod,
                    init_template=claim_template([one_device("test-class", selectors=[{"cel": {"expression": selector}}])]))


def _consumable_capacity(size: Size, params: dict[str, Any]) -> OurShape:
    # upstream's resourceslice-consumablecapacity.yaml: one shareable device of 80Gi per slice; each claim takes
    # two shares of 40Gi, so one claim fills a device
    device = {"name": "shareable-device", "allowMultipleAllocations": True,
              "capacity": {"memory": {"value": "80Gi", "requestPolicy": {"default": "1Gi", "validRange": {"min": "1Gi"}}}}}
    objects = [device_class("test-class", f'device.driver == "{TEST_DRIVER}" && device.allowMultipleAllocations == true')]
    for i in range(int(params["resourceSlices"])):
        objects += pre_created_pool(i, [device])
    share = {"capacity": {"requests": {"memory": "40Gi"}}}
    requests = [{"name": f"req-{r}", "exactly": {"deviceClassName": "test-class", **share}} for r in range(2)]
    return OurShape(objects, claim_template(requests), claim_pod)


FEATURES: dict[str, Feature] = {f.name: f for f in (
    Feature("device-taints", "devicetaints", {
        "1.34": ("SchedulingWithResourceClaimTemplateToleration", "fast"), "1.35": ("DeviceTaintToleration", "fast"),
        "1.36": ("DeviceTaintToleration", "fast"), "1.37": ("DeviceTaintToleration", "fast")}, PUBLISHED, _device_taints),
    Feature("prioritized-list", "prioritizedlist", {
        "1.34": ("SteadyStateClusterResourceClaimTemplateFirstAvailable", "fast"), "1.35": ("FirstAvailable", "fast"),
        "1.36": ("FirstAvailable", "fast"), "1.37": ("FirstAvailable", "fast")}, PUBLISHED, _prioritized_list),
    Feature("extended-resource", "extendedresource", {
        # 1.34's pod template asks pod i for class i (its params have 1,000 classes): not this shape; left out
        "1.35": ("ExtendedResource_25Classes", "2000pods_200nodes"),
        "1.36": ("ExtendedResource_25Classes", "2000pods_200nodes"),
        "1.37": ("ExtendedResource", "Explicit_25classes_2000pods_200nodes")}, PUBLISHED, _extended_resource),
    Feature("partitionable-devices", "partitionabledevices", {
        # 1.37 reshaped it (one pool per node, 10 measured pods in a steady state): left out
        "1.34": ("SteadyStateClusterResourceClaimTemplatePartitionable", "2000pods_100nodes"),
        "1.35": ("Partitionable", "2000pods_100nodes"), "1.36": ("Partitionable", "2000pods_100nodes")},
        # an init claim and a measured one share a pool, as upstream's params have it (as many pools as each)
        PRE_CREATED, _partitionable, lambda size: max(size.init, size.measured)),
    Feature("consumable-capacity", "consumablecapacity", {
        "1.34": ("SteadyStateClusterResourceClaimTemplateConsumableCapacity", "2000pods_100nodes"),
        "1.35": ("ConsumableCapacity", "2000pods_100nodes"), "1.36": ("ConsumableCapacity", "2000pods_100nodes")},
        PRE_CREATED, _consumable_capacity, lambda size: size.init + size.measured),  # a claim fills a pool
)}


def feature(name: str) -> Feature:
    """The feature called `name`; ShapeError naming the valid ones otherwise."""
    if name not in FEATURES:
        raise ShapeError(f"unknown feature {name!r}; features: {', '.join(FEATURES)}")
    return FEATURES[name]


# ----------------------------------------------------------------------------- upstream's side
def resized_params(named: dict[str, Any], size: Size, pools: int) -> dict[str, Any]:
    """The named workload's params with the size ones set to `size` (only those it has): every node with DRA,
    `size.devices` per node, `pools` pools of pre-created slices, no steady state (pods are created once and
    measured as they schedule, as ours are)."""
    size_params = {"nodesWithDRA": size.nodes, "nodesWithoutDRA": 0, "maxClaimsPerNode": size.devices,
                   "initPods": size.init, "initClaims": size.init, "measurePods": size.measured,
                   "resourceSlices": pools, "steadyState": False, "duration": "0s"}
    return {key: size_params.get(key, value) for key, value in named.items()} | {"measurePods": size.measured}


def upstream_config(text: str, test_case: str, named: str, size: Size,
                    pools: Callable[[Size], int] = lambda size: 0) -> tuple[str, dict[str, Any]]:
    """A copy of an upstream performance-config.yaml (`text`) holding `test_case` only, with one more workload,
    OUR_WORKLOAD (label performance): `named`'s params resized (resized_params) and its feature gates but
    SchedulerQueueingHints (left at the release's default, as our bed's scheduler has it). A measured createPods
    with a literal count gets the measured count, a slice template's literal numDevices `size.devices`; a
    workload with no init params runs no init pods whatever `size` says (measured_size reads the size back).
    Returns the config's text and the resized params."""
    cases = yaml.safe_load(text)
    case = next((c for c in cases if c["name"] == test_case), None)
    if case is None:
        raise ShapeError(f"no test case {test_case!r} in the config; test cases: {', '.join(c['name'] for c in cases)}")
    workload = next((w for w in case["workloads"] if w["name"] == named), None)
    if workload is None:
        raise ShapeError(f"no workload {named!r} in {test_case}; workloads: {', '.join(w['name'] for w in case['workloads'])}")
    case = copy.deepcopy(case)
    named_params = workload.get("params", {})
    if not INIT_PARAMS & named_params.keys():
        size = replace(size, init=0)
    params = resized_params(named_params, size, pools(size))
    for op in case["workloadTemplate"]:
        if "numDevices" in op.get("templateParams", {}):  # 1.37's per-node slices say their device count so
            op["templateParams"]["numDevices"] = size.devices
        if op.get("opcode") == "createPods" and op.get("collectMetrics"):
            if "count" in op:
                del op["count"]
                op["countParam"] = "$measurePods"
            if op.get("steadyState"):  # 1.34's SteadyState* cases say so literally
                op["steadyState"] = False
    gates = {k: v for k, v in (workload.get("featureGates") or {}).items() if k != "SchedulerQueueingHints"}
    case["workloads"] = [{"name": OUR_WORKLOAD, "labels": ["performance"], "params": params,
                          **({"featureGates": gates} if gates else {})}]
    return yaml.safe_dump([case], sort_keys=False), params


def measured_size(params: dict[str, Any], size: Size) -> Size:
    """The size a run of resized `params` has: `size` with the init pods the params have (none where none)."""
    return replace(size, init=next((int(params[k]) for k in sorted(INIT_PARAMS) if k in params), 0))


def bench_pattern(test_case: str) -> str:
    """The -test.bench pattern of OUR_WORKLOAD of `test_case`."""
    return f"BenchmarkPerfScheduling/{test_case}/{OUR_WORKLOAD}$"


def api_path(obj: dict[str, Any], namespace: str | None = None) -> str:
    """The collection path to create `obj` at (kinds here are regular: lowercase, plural -s or -es after s)."""
    group, kind = obj["apiVersion"], obj["kind"].lower()
    base = f"/api/{group}" if "/" not in group else f"/apis/{group}"
    return f"{base}{f'/namespaces/{namespace}' if namespace else ''}/{kind}{'es' if kind.endswith('s') else 's'}"
