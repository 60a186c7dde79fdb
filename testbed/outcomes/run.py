"""Apply, settle, explain: user manifests on a live cluster, one outcome per pod, claim and DeviceClass."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kubernetes import client

from testbed.kube.apiviews import dynamic_client
from testbed.kube.namespaces import create_namespace
from testbed.outcomes.claims import ClaimOutcome, ClassOutcome, explain_claim, explain_class
from testbed.outcomes.explain import PodOutcome, explain
from testbed.outcomes.fleet import Fleet
from testbed.outcomes.manifests import WORKLOAD_KINDS, Applied, Applier, Manifest
from testbed.outcomes.settle import settle
from testbed.outcomes.workloads import Workload, complete, fixed_pods, notes

RUN_LABEL = "dra-testbed.io/try"


@dataclass
class RunResult:
    """The outcomes of one set of manifests on one fleet."""

    fleet: str
    k8s: str
    server: str
    pods: list[PodOutcome] = field(default_factory=list)
    settled: bool = True
    seconds: float = 0.0
    claims: list[ClaimOutcome] = field(default_factory=list)
    device_classes: list[ClassOutcome] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # unknown and duplicate fields, file:line first
    notes: list[str] = field(default_factory=list)
    generated: dict[str, str] = field(default_factory=dict)  # "Kind/server name" -> "Kind/generateName prefix"

    @property
    def ok(self) -> bool:
        return self.settled and all(p.ok for p in self.pods)

    def as_dict(self) -> dict:
        return {"fleet": self.fleet, "k8s": self.k8s, "server": self.server, "settled": self.settled,
                "seconds": round(self.seconds, 2), "ok": self.ok, "pods": [p.as_dict() for p in self.pods],
                "claims": [c.as_dict() for c in self.claims], "device_classes": [c.as_dict() for c in self.device_classes],
                "warnings": self.warnings, "notes": self.notes}


def run_manifests(api: client.ApiClient, manifests: list[Manifest], *, fleet: str, minor: str | None = None,
                  timeout: float = 120.0, keep: bool = False, strict: bool = False) -> RunResult:
    """Check every manifest (dry run), apply them, wait until scheduling settles, explain every pod, claim and class.

    Objects without a namespace go to a fresh namespace of the run; everything the run created is
    removed afterwards unless `keep`. ManifestError when the apiserver refuses a manifest, or under
    `strict` when one has an unknown or duplicate field (nothing created). `minor` (whose CEL compiler
    evaluates the selectors) defaults to the server's.
    """
    core = client.CoreV1Api(api)
    version = client.VersionApi(api).get_code()
    minor = minor or f"{version.major}.{version.minor.rstrip('+')}"
    namespace = f"try-{uuid.uuid4().hex[:8]}"
    create_namespace(core, namespace, {RUN_LABEL: "true"})
    applier = Applier(api, namespace, strict)
    applied = Applied(namespaces=[namespace], created_namespaces=[namespace])
    try:
        applier.check(manifests)
        applied = applier.apply(manifests)
        applied.created_namespaces.insert(0, namespace)
        made = [Workload(o.kind, o.namespace or namespace, o.name, o.uid, o.spec) for o in applied.objects if o.kind in WORKLOAD_KINDS]
        extra = [("apps/v1", "DaemonSet")] if any(w.kind == "DaemonSet" for w in made) else []
        snapshot = settle(api, applied.namespaces, sum(fixed_pods(w) for w in made), timeout=timeout,
                          complete=complete(made), extra=extra)
        claims = dynamic_client(api).resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim").get().to_dict()["items"]
        view = Fleet.read(api, minor)
        return RunResult(fleet, minor, version.git_version, explain(snapshot, view, claims), snapshot.settled, snapshot.seconds,
                         claims=[explain_claim(o.namespace or namespace, o.name, snapshot, view, claims)
                                 for o in applied.objects if o.kind == "ResourceClaim"],
                         device_classes=[explain_class(m.name, view) for m in manifests if m.kind == "DeviceClass"],
                         warnings=list(applied.warnings), notes=applied.notes + notes(made, snapshot),
                         generated={f"{o.kind}/{o.name}": f"{o.kind}/{o.manifest.name}" for o in applied.objects
                                    if o.manifest.generated and o.kind == o.manifest.kind})
    finally:
        if not keep:
            applier.remove(applied)
