"""User manifests as they are: checked by the apiserver (dry run, strict field validation), then applied as
`kubectl apply -f` / `kubectl create -f` would, and removed again.

Order: Namespaces, CustomResourceDefinitions and other cluster-scoped objects first, then namespaced ones
(accounts and configuration, claims and templates, workloads last), each group in input order. Nothing is
created until every object has passed a server-side dry run. An object in a Namespace the input creates is
dry-run in a stand-in namespace of the run carrying that Namespace's labels (admission reads them: the
admin-access label, Pod Security levels), so the check sees what the real create will. Two things a dry run
cannot see before the real creates are checked just before their own create instead: custom resources whose
CRD is in the input (served only once the CRD is established) and objects refused for want of another object
of the input (a Pod's ServiceAccount). If one of those, or any real create, is refused, everything created
so far is deleted again and the error says so. Unknown and duplicate fields are warnings with their line,
errors under `strict`.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from testbed.kube.apiviews import dynamic_client
from testbed.kube.namespaces import create_namespace
from testbed.kube.waiting import WaitTimeout, wait_for
from testbed.outcomes import server
from testbed.outcomes.cel import error_position
from testbed.outcomes.documents import ORDER, WORKLOAD_KINDS, Manifest, ManifestError, load  # noqa: F401 - the package's API
from testbed.outcomes.locator import duplicate_keys, line_of
from testbed.outcomes.projects import not_served
from testbed.outcomes.workloads import job_from_cronjob, suspended_cronjob

_EXPRESSION = re.compile(r'Invalid value: "((?:[^"\\]|\\.)*)": (?:compilation failed: )?')
# refusals for want of another object, which the input may create before this one
_MISSING = (re.compile(r'(\w+) "([^"]+)" not found'), re.compile(r"no (PriorityClass) with name (\S+) was found"))
CRD = "CustomResourceDefinition"


@dataclass(frozen=True)
class CreatedObject:
    """One object a run created, by the name the server gave it."""

    manifest: Manifest
    api_version: str
    kind: str
    namespace: str | None
    name: str
    uid: str
    spec: dict = field(default_factory=dict, compare=False)


@dataclass
class Applied:
    """What a run created: namespaces (its own and the user's) and objects, for the report and clean-up."""

    namespaces: list[str] = field(default_factory=list)
    created_namespaces: list[str] = field(default_factory=list)
    cluster_objects: list[tuple[str, str, str]] = field(default_factory=list)  # apiVersion, kind, name
    manifests: list[Manifest] = field(default_factory=list)
    objects: list[CreatedObject] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)  # unknown and duplicate fields, file:line first
    notes: list[str] = field(default_factory=list)  # what was done otherwise than asked, and why


def describe_api_error(manifest: Manifest, exc: ApiException) -> str:
    """The apiserver's refusal as one line; CEL compile errors as expression, position and message."""
    try:
        status = json.loads(exc.body or "{}")
    except ValueError:
        status = {}
    message = status.get("message") or exc.reason or str(exc.status)
    cel = error_position(message)
    if cel is not None:
        line, column, text = cel
        expression = _EXPRESSION.search(message)
        field_path = message.split(": Invalid value", 1)[0].rsplit(": ", 1)[-1]
        shown = expression[1].encode().decode("unicode_escape") if expression else "?"
        return f"{manifest.label()}: CEL error in {field_path} at line {line}, column {column}: {text}; expression: {shown}"
    return f"{manifest.label()}: {' '.join(message.split())}"


def field_problems(manifest: Manifest, answer: server.Created) -> list[str]:
    """Unknown fields the server named and keys the document sets twice, each as `file:line (Kind name): ...`."""
    problems = [f"{manifest.at(line_of(manifest.node, f.path))}: {f.problem} field {f.path}" for f in answer.fields]
    problems += [f"{manifest.at(d.line)}: duplicate field {d.path} (the last value is used)" for d in duplicate_keys(manifest.node)]
    return problems


class Applier:
    """Checks and applies manifests through the API server; namespaced objects without one go to `namespace`."""

    def __init__(self, api: client.ApiClient, namespace: str, strict: bool = False) -> None:
        self.api = api
        self.namespace = namespace
        self.strict = strict
        self.dynamic = dynamic_client(api)
        self.core = client.CoreV1Api(api)
        self.stand_ins: dict[str, str] = {}  # a Namespace of the input -> the run's namespace standing in for it
        self.deferred: set[int] = set()  # ids of manifests checked just before their own create
        self.warnings: list[str] = []

    # --- what the server serves --------------------------------------------------------------------------

    def _input_crds(self, manifests: list[Manifest]) -> dict[tuple[str, str], Manifest]:
        """(group, kind) -> the CRD of the input that defines it."""
        found = {}
        for manifest in manifests:
            if manifest.kind == CRD:
                spec = manifest.body.get("spec") or {}
                found[(spec.get("group", ""), (spec.get("names") or {}).get("kind", ""))] = manifest
        return found

    def _resource(self, manifest: Manifest, crds: dict | None = None):
        """The served resource of the manifest's kind; None when a CRD of the input will serve it."""
        api_version = manifest.body["apiVersion"]
        try:
            return self.dynamic.resources.get(api_version=api_version, kind=manifest.kind)
        except ResourceNotFoundError as exc:
            if crds and (api_version.rsplit("/", 1)[0], manifest.kind) in crds:
                return None
            raise ManifestError(f"{manifest.label()}: {not_served(manifest.kind, api_version)}") from exc

    def _rank(self, manifest: Manifest, crds: dict) -> tuple[int, int]:
        """Namespaces, CRDs, other cluster-scoped objects, then namespaced ones by kind (workloads last)."""
        ranks = {kind: i for i, kind in enumerate(ORDER)}
        if manifest.kind in ("Namespace", CRD):
            return (0, ranks[manifest.kind])
        resource = self._resource(manifest, crds)
        if resource is None:
            scope = (crds[(manifest.body["apiVersion"].rsplit("/", 1)[0], manifest.kind)].body["spec"].get("scope"))
            cluster_scoped = scope == "Cluster"
        else:
            cluster_scoped = not resource.namespaced
        if cluster_scoped:
            return (1, ranks.get(manifest.kind, len(ORDER)))
        if manifest.kind in WORKLOAD_KINDS:
            return (3, 0)
        return (2, ranks.get(manifest.kind, len(ORDER)))

    def ordered(self, manifests: list[Manifest]) -> list[Manifest]:
        crds = self._input_crds(manifests)
        return sorted(manifests, key=lambda m: self._rank(m, crds))  # stable: input order within a rank

    def _target(self, manifest: Manifest, resource) -> str | None:
        """The namespace the object will live in (None: cluster-scoped)."""
        if resource is not None and not resource.namespaced:
            return None
        return manifest.body["metadata"].get("namespace") or self.namespace

    # --- check: dry runs before anything of the input exists --------------------------------------------

    def check(self, manifests: list[Manifest]) -> list[str]:
        """Dry-run every manifest the server can judge now; ManifestError on a refusal (or a field problem
        under `strict`), nothing created but the run's stand-in namespaces. Returns the field warnings."""
        crds = self._input_crds(manifests)
        existing = {n.metadata.name for n in self.core.list_namespace().items}
        for index, manifest in enumerate(m for m in self.ordered(manifests) if m.kind == "Namespace"):
            if manifest.name not in existing:
                stand_in = f"{self.namespace}-{index + 1}"
                create_namespace(self.core, stand_in, dict(manifest.body["metadata"].get("labels") or {}))
                self.stand_ins[manifest.name] = stand_in
        try:
            earlier: list[Manifest] = []
            for manifest in self.ordered(manifests):
                self._check_one(manifest, crds, existing, earlier)
                earlier.append(manifest)
        finally:
            self._drop_stand_ins()
        self._enforce()
        return self.warnings

    def _check_one(self, manifest: Manifest, crds: dict, existing: set[str], earlier: list[Manifest]) -> None:
        resource = self._resource(manifest, crds)
        if resource is None:
            self.deferred.add(id(manifest))  # its CRD is in the input: judged once that is established
            return
        try:
            self._dry_run(manifest, resource, self._standing_in(self._target(manifest, resource), existing))
        except ApiException as exc:
            if exc.status == 409:
                return  # exists already (the bed's DeviceClass, a Namespace): apply says what it does
            if not _needs_earlier(exc, earlier):
                raise ManifestError(describe_api_error(manifest, exc)) from exc
            self.deferred.add(id(manifest))

    def _drop_stand_ins(self) -> None:
        for name in self.stand_ins.values():
            try:
                self.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
            except ApiException as exc:
                if exc.status != 404:
                    raise
        self.stand_ins.clear()

    def _standing_in(self, namespace: str | None, existing: set[str]) -> str | None:
        if namespace is None:
            return None
        if namespace in self.stand_ins:
            return self.stand_ins[namespace]
        return namespace if namespace in existing else self.namespace  # one apply creates (see `apply`)

    def _dry_run(self, manifest: Manifest, resource, namespace: str | None) -> None:
        body = _in_namespace(manifest.body, namespace)
        answer = server.create(self.api, resource.path(namespace=namespace), body, dry_run=True)
        self.warnings += field_problems(manifest, answer)

    def _enforce(self) -> None:
        if self.strict and self.warnings:
            more = f" (and {len(self.warnings) - 1} more)" if len(self.warnings) > 1 else ""
            raise ManifestError(f"{self.warnings[0]}{more}; --strict refuses unknown and duplicate fields")

    # --- apply: the real creates ----------------------------------------------------------------------

    def apply(self, manifests: list[Manifest]) -> Applied:
        """Create every manifest in order; namespaces the objects name are created if the input does not.
        On a refusal everything created is deleted again and ManifestError says so."""
        applied = Applied(namespaces=[self.namespace], manifests=list(manifests), warnings=self.warnings)
        crds = self._input_crds(manifests)
        existing = {n.metadata.name for n in self.core.list_namespace().items}
        for manifest in self.ordered(manifests):
            try:
                self._apply_one(manifest, crds, existing, applied)
            except (ApiException, ManifestError, WaitTimeout) as exc:
                reason = describe_api_error(manifest, exc) if isinstance(exc, ApiException) else str(exc)
                made = len(applied.objects) + len(applied.created_namespaces)
                self.remove(applied)
                undone = f"; the {made} objects created before it were deleted again" if made else "; nothing was created"
                raise ManifestError(reason + undone) from exc
        return applied

    def _apply_one(self, manifest: Manifest, crds: dict, existing: set[str], applied: Applied) -> None:
        if manifest.kind == "Namespace":
            if manifest.name in existing:
                applied.notes.append(f"Namespace {manifest.name} exists already: used as it is")
            else:
                create_namespace(self.core, manifest.name, dict(manifest.body["metadata"].get("labels") or {}))
                applied.created_namespaces.append(manifest.name)
                existing.add(manifest.name)
            if manifest.name not in applied.namespaces:
                applied.namespaces.append(manifest.name)
            return
        resource = self._resource(manifest, crds)
        if resource is None:
            resource = self._served_after_crd(manifest)
            applied.notes.append(f"{manifest.kind} {manifest.name}: created with the input's CRD; no controller for "
                                 f"{manifest.body['apiVersion']} runs on the bed, so it makes no pods")
        namespace = self._target(manifest, resource)
        if namespace and namespace not in existing:
            create_namespace(self.core, namespace)
            applied.created_namespaces.append(namespace)
            existing.add(namespace)
        if namespace and namespace not in applied.namespaces:
            applied.namespaces.append(namespace)
        if id(manifest) in self.deferred:
            self._dry_run(manifest, resource, namespace)
            applied.warnings = self.warnings
            self._enforce()
        body = suspended_cronjob(manifest.body) if manifest.kind == "CronJob" else manifest.body
        try:
            answer = server.create(self.api, resource.path(namespace=namespace), _in_namespace(body, namespace), dry_run=False)
        except ApiException as exc:
            if exc.status == 409 and namespace is None:
                applied.notes.append(f"{manifest.kind} {manifest.name} exists on the bed already: the bed's is used, the input's is not applied")
                return
            raise
        self._record(manifest, resource, answer.body, applied)
        if manifest.kind == CRD:
            self._established(answer.body["metadata"]["name"])
        if manifest.kind == "CronJob":
            job = job_from_cronjob(answer.body)
            jobs = self.dynamic.resources.get(api_version="batch/v1", kind="Job")
            self._record(manifest, jobs, server.create(self.api, jobs.path(namespace=namespace), job, dry_run=False).body, applied)
            applied.notes.append(f"CronJob {namespace}/{manifest.name}: created suspended, and Job {job['metadata']['name']} "
                                 "made from it at once (as kubectl create job --from=cronjob/... does) instead of waiting for its schedule")

    def _record(self, manifest: Manifest, resource, body: dict, applied: Applied) -> None:
        meta = body["metadata"]
        applied.objects.append(CreatedObject(manifest, body["apiVersion"], body["kind"], meta.get("namespace"), meta["name"],
                                             meta.get("uid", ""), body.get("spec") or {}))
        if not resource.namespaced:
            applied.cluster_objects.append((body["apiVersion"], body["kind"], meta["name"]))

    def _served_after_crd(self, manifest: Manifest):
        """The resource of a kind a CRD of the input defines (created and established before this object)."""
        self.dynamic.resources.invalidate_cache()
        try:
            return self.dynamic.resources.get(api_version=manifest.body["apiVersion"], kind=manifest.kind)
        except ResourceNotFoundError as exc:
            raise ManifestError(f"{manifest.label()}: the input's CRD for {manifest.kind} is established but the server "
                                f"does not serve {manifest.body['apiVersion']}; check the CRD's versions") from exc

    def _established(self, name: str) -> None:
        def ready(crd) -> bool:
            return any(c.type == "Established" and c.status == "True" for c in (crd.status.conditions or []))

        wait_for(client.ApiextensionsV1Api(self.api).list_custom_resource_definition, ready, name=name, timeout=30,
                 what=f"CustomResourceDefinition {name} to be established")

    # --- remove -----------------------------------------------------------------------------------------

    def remove(self, applied: Applied) -> None:
        """Delete what `apply` created (last first) and the namespaces it created."""
        gone = set(applied.created_namespaces)
        for created in reversed(applied.objects):
            if created.namespace in gone:
                continue  # goes with its namespace
            try:
                resource = self.dynamic.resources.get(api_version=created.api_version, kind=created.kind)
                resource.delete(name=created.name, namespace=created.namespace, propagation_policy="Background")
            except (ApiException, ResourceNotFoundError) as exc:
                if getattr(exc, "status", 404) != 404:
                    raise
        for name in applied.created_namespaces:
            try:
                self.core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
            except ApiException as exc:
                if exc.status != 404:
                    raise


def _needs_earlier(exc: ApiException, earlier: list[Manifest]) -> bool:
    """Whether the refusal names an object the input creates before this one (then the dry run must wait)."""
    message = exc.body or ""
    for pattern in _MISSING:
        for kind, name in pattern.findall(message):
            if any(kind.lower() in (m.kind.lower(), f"{m.kind.lower()}s") and m.name == name for m in earlier):
                return True
    return False


def _in_namespace(body: dict, namespace: str | None) -> dict:
    metadata = {k: v for k, v in body["metadata"].items() if k != "namespace"}
    if namespace is not None:
        metadata["namespace"] = namespace
    return dict(body, metadata=metadata)
