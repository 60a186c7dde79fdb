"""`try` on manifests as people ship them (issue 46), on one live Hopper-only bed: an admin-access Namespace and
its claim template in one file, a claim with a mis-nested spec, Jobs named by the server, workload kinds
beyond Deployment/Job/StatefulSet, custom resources, and a refused object after real creates (rolled back).
Every manifest here was written for these tests.
"""

from __future__ import annotations

import uuid

import pytest
from kubernetes import client

from testbed.outcomes.manifests import ManifestError, load
from testbed.outcomes.run import RunResult, run_manifests

from .conftest import HopperBed

pytestmark = pytest.mark.cluster

POD = """apiVersion: v1
kind: Pod
metadata: {{name: {name}, namespace: {namespace}}}
spec:
  terminationGracePeriodSeconds: 0
  containers:
  - {{name: main, image: registry.invalid/probe:1, resources: {{claims: [{{name: gpu}}]}}}}
  resourceClaims:
  - {{name: gpu, resourceClaimTemplateName: {template}}}
"""

ADMIN_ACCESS = """apiVersion: v1
kind: Namespace
metadata:
  name: {namespace}
  labels: {{resource.kubernetes.io/admin-access: "true"}}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {{name: watch-every-gpu, namespace: {namespace}}}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {{deviceClassName: gpu.nvidia.com, adminAccess: true}}
---
""" + POD

MIS_NESTED = """# a claim whose devices sit one spec too deep, and a key set twice
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: nested-too-deep}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
---
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata:
  name: spare-gpu
  name: spare-gpu
spec:
  devices:
    requests:
    - name: gpu
      exactly: {deviceClassName: one-h100-80gb}
---
apiVersion: resource.k8s.io/v1
kind: DeviceClass
metadata: {name: one-h100-80gb}
spec:
  selectors:
  - cel: {expression: "device.driver == 'gpu.nvidia.com' && device.attributes['gpu.nvidia.com'].productName == 'NVIDIA H100 80GB HBM3'"}
"""

TEMPLATE = """apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: one-gpu}
spec:
  spec:
    devices:
      requests:
      - name: gpu
        exactly: {deviceClassName: gpu.nvidia.com}
"""

POD_TEMPLATE = """
      terminationGracePeriodSeconds: 0
      restartPolicy: {restart}
      containers:
      - {{name: main, image: registry.invalid/worker:1, resources: {{claims: [{{name: gpu}}]}}}}
      resourceClaims:
      - {{name: gpu, resourceClaimTemplateName: one-gpu}}
"""

GENERATED_JOB = TEMPLATE + """---
apiVersion: batch/v1
kind: Job
metadata: {generateName: finetune-}
spec:
  parallelism: 2
  completions: 2
  template:
    spec:""" + POD_TEMPLATE.format(restart="Never")


def _controller(kind: str, name: str, extra: str = "", pod_extra: str = "") -> str:
    """An apps/v1 workload of pods each with a claim from the one-gpu template."""
    return f"""---
apiVersion: apps/v1
kind: {kind}
metadata: {{name: {name}}}
spec:{extra}
  selector: {{matchLabels: {{app: {name}}}}}
  template:
    metadata: {{labels: {{app: {name}}}}}
    spec:{pod_extra}""" + POD_TEMPLATE.format(restart="Always")


WORKLOAD_KINDS = (TEMPLATE + _controller("StatefulSet", "shard", "\n  replicas: 3")
                  + _controller("DaemonSet", "node-probe", pod_extra="\n      tolerations: [{operator: Exists}]")
                  + _controller("ReplicaSet", "servers", "\n  replicas: 2") + """---
apiVersion: batch/v1
kind: CronJob
metadata: {name: nightly-eval}
spec:
  schedule: "0 3 * * *"
  jobTemplate:
    spec:
      template:
        spec:""" + POD_TEMPLATE.format(restart="Never").replace("\n      ", "\n          "))


UNSERVED = """apiVersion: ray.io/v1
kind: RayJob
metadata: {name: tune}
spec: {entrypoint: python tune.py}
"""

CRD_AND_BAD_OBJECT = """apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata: {name: gpubudgets.example.dra-testbed.io}
spec:
  group: example.dra-testbed.io
  scope: Namespaced
  names: {kind: GpuBudget, plural: gpubudgets, singular: gpubudget}
  versions:
  - name: v1
    served: true
    storage: true
    schema:
      openAPIV3Schema:
        type: object
        properties:
          spec:
            type: object
            required: [gpus]
            properties: {gpus: {type: integer, minimum: 1}}
---
apiVersion: example.dra-testbed.io/v1
kind: GpuBudget
metadata: {name: team-a}
spec: {gpus: 0}
"""


def _write(tmp_path, name: str, text: str):
    path = tmp_path / name
    path.write_text(text)
    return path


def _pods(result: RunResult, owner_prefix: str) -> list:
    return [p for p in result.pods if p.owner.startswith(owner_prefix)]


def test_an_admin_access_namespace_and_its_template_apply_in_one_file(hopper_bed: HopperBed, tmp_path) -> None:
    namespace = f"gpu-admin-{uuid.uuid4().hex[:6]}"
    text = ADMIN_ACCESS.format(namespace=namespace, name="gpu-watcher", template="watch-every-gpu")
    result = run_manifests(hopper_bed.api, load([_write(tmp_path, "admin.yaml", text)]), fleet="h100-only", minor=hopper_bed.minor)
    (pod,) = result.pods
    assert (pod.namespace, pod.verdict) == (namespace, "scheduled") and len(pod.allocations) == 1
    assert result.ok and not result.warnings


def test_an_unknown_field_is_a_warning_with_its_line_and_every_claim_and_class_is_reported(hopper_bed: HopperBed, tmp_path) -> None:
    path = _write(tmp_path, "nested.yaml", MIS_NESTED)
    result = run_manifests(hopper_bed.api, load([path]), fleet="h100-only", minor=hopper_bed.minor)
    assert result.warnings == [f"{path}:6 (ResourceClaim nested-too-deep): unknown field spec.spec",
                               f"{path}:16 (ResourceClaim spare-gpu): duplicate field metadata.name (the last value is used)"]
    claims = {c.name: c for c in result.claims}
    assert claims["nested-too-deep"].verdict == "unallocated"
    assert claims["nested-too-deep"].reasons == ["it asks for no devices (spec.devices.requests is empty; see the field warnings)"]
    spare = claims["spare-gpu"]
    assert spare.verdict == "unallocated" and spare.reasons[0].startswith("no pod uses it")
    assert spare.reasons[1].startswith("a pod using it would get devices on h100-")
    (device_class,) = result.device_classes
    published = [d for s in client.ResourceV1Api(hopper_bed.api).list_resource_slice().items for d in s.spec.devices or []
                 if (d.attributes or {}).get("productName") and d.attributes["productName"].string == "NVIDIA H100 80GB HBM3"]
    assert (device_class.name, device_class.devices, device_class.problem) == ("one-h100-80gb", len(published), None)
    assert device_class.boards == {"h100-80gb": len(published)} and len(published) > 8  # MIG slices name their product too


def test_strict_refuses_an_unknown_field_and_creates_nothing(hopper_bed: HopperBed, tmp_path) -> None:
    # names of this test's own: the previous test's namespace may still be going
    text = MIS_NESTED.replace("nested-too-deep", "strict-nested").replace("spare-gpu", "strict-spare").replace("one-h100-80gb", "strict-h100")
    path = _write(tmp_path, "nested.yaml", text)
    with pytest.raises(ManifestError) as refused:
        run_manifests(hopper_bed.api, load([path]), fleet="h100-only", minor=hopper_bed.minor, strict=True)
    assert str(refused.value) == (f"{path}:6 (ResourceClaim strict-nested): unknown field spec.spec (and 1 more); "
                                  "--strict refuses unknown and duplicate fields")
    names = {c.metadata.name for c in client.ResourceV1Api(hopper_bed.api).list_resource_claim_for_all_namespaces().items}
    classes = {c.metadata.name for c in client.ResourceV1Api(hopper_bed.api).list_device_class().items}
    assert not {"strict-nested", "strict-spare"} & names and "strict-h100" not in classes


def test_a_job_named_by_the_server_is_created_and_reported_by_that_name(hopper_bed: HopperBed, tmp_path) -> None:
    result = run_manifests(hopper_bed.api, load([_write(tmp_path, "job.yaml", GENERATED_JOB)]), fleet="h100-only",
                           minor=hopper_bed.minor)
    owners = {p.owner for p in result.pods}
    (owner,) = owners
    assert owner.startswith("Job/finetune-") and len(owner) > len("Job/finetune-")
    assert len(result.pods) == 2 and all(p.verdict == "scheduled" and p.allocations for p in result.pods)
    assert result.generated == {owner: "Job/finetune-"}


def test_cronjob_daemonset_replicaset_and_an_ordered_statefulset_report_every_pod(hopper_bed: HopperBed, tmp_path) -> None:
    result = run_manifests(hopper_bed.api, load([_write(tmp_path, "kinds.yaml", WORKLOAD_KINDS)]), fleet="h100-only",
                           minor=hopper_bed.minor)
    assert result.settled
    assert sorted(p.name for p in _pods(result, "StatefulSet/shard")) == ["shard-0", "shard-1", "shard-2"]
    daemons = _pods(result, "DaemonSet/node-probe")
    assert sorted(p.node for p in daemons) == sorted(n.name for n in hopper_bed.layout.nodes)
    assert len(_pods(result, "Deployment/servers")) + len(_pods(result, "ReplicaSet/servers")) == 2
    (evaluation,) = _pods(result, "Job/nightly-eval-manual")
    assert all(p.verdict == "scheduled" for p in result.pods), [(p.name, p.verdict) for p in result.pods]
    assert any("CronJob" in n and "nightly-eval-manual" in n for n in result.notes)


def test_a_custom_resource_nobody_serves_names_its_project(hopper_bed: HopperBed, tmp_path) -> None:
    with pytest.raises(ManifestError, match=r"\(RayJob tune\): this bed serves no RayJob in ray.io/v1: it comes from KubeRay"):
        run_manifests(hopper_bed.api, load([_write(tmp_path, "ray.yaml", UNSERVED)]), fleet="h100-only", minor=hopper_bed.minor)


def test_a_refusal_after_real_creates_deletes_them_again_and_says_so(hopper_bed: HopperBed, tmp_path) -> None:
    with pytest.raises(ManifestError) as refused:
        run_manifests(hopper_bed.api, load([_write(tmp_path, "crd.yaml", CRD_AND_BAD_OBJECT)]), fleet="h100-only",
                      minor=hopper_bed.minor)
    message = str(refused.value)
    assert "(GpuBudget team-a)" in message and "spec.gpus" in message
    assert message.endswith("the 1 objects created before it were deleted again")
    crds = client.ApiextensionsV1Api(hopper_bed.api).list_custom_resource_definition().items
    assert "gpubudgets.example.dra-testbed.io" not in {c.metadata.name for c in crds if not c.metadata.deletion_timestamp}
