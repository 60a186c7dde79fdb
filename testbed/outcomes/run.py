"""Apply, settle, explain: user manifests on a live cluster, one outcome per pod."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field

from kubernetes import client

from testbed.kube.apiviews import dynamic_client
from testbed.kube.namespaces import create_namespace
from testbed.outcomes.explain import PodOutcome, explain
from testbed.outcomes.fleet import Fleet
from testbed.outcomes.manifests import Applied, Applier, Manifest, expected_pods
from testbed.outcomes.settle import settle

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

    @property
    def ok(self) -> bool:
        return self.settled and all(p.ok for p in self.pods)

    def as_dict(self) -> dict:
        return {"fleet": self.fleet, "k8s": self.k8s, "server": self.server, "settled": self.settled,
                "seconds": round(self.seconds, 2), "ok": self.ok, "pods": [p.as_dict() for p in self.pods]}


def run_manifests(api: client.ApiClient, manifests: list[Manifest], *, fleet: str, minor: str | None = None,
                  timeout: float = 120.0, keep: bool = False) -> RunResult:
    """Check every manifest (dry run), apply them, wait until scheduling settles, explain every pod.

    Objects without a namespace go to a fresh namespace of the run; everything the run created is
    removed afterwards unless `keep`. ManifestError when the apiserver refuses a manifest (nothing created).
    `minor` (whose CEL compiler evaluates the selectors) defaults to the server's.
    """
    core = client.CoreV1Api(api)
    version = client.VersionApi(api).get_code()
    minor = minor or f"{version.major}.{version.minor.rstrip('+')}"
    namespace = f"try-{uuid.uuid4().hex[:8]}"
    create_namespace(core, namespace, {RUN_LABEL: "true"})
    applier = Applier(api, namespace)
    applied = Applied(namespaces=[namespace], created_namespaces=[namespace])
    try:
        applier.check(manifests)
        applied = applier.apply(manifests)
        applied.created_namespaces.insert(0, namespace)
        snapshot = settle(api, applied.namespaces, expected_pods(manifests), timeout=timeout)
        claims = dynamic_client(api).resources.get(api_version="resource.k8s.io/v1", kind="ResourceClaim").get().to_dict()["items"]
        view = Fleet.read(api, minor)
        return RunResult(fleet, minor, version.git_version, explain(snapshot, view, claims), snapshot.settled, snapshot.seconds)
    finally:
        if not keep:
            applier.remove(applied)
