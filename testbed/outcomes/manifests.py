"""User manifests as they are: loaded from YAML files, checked by the apiserver (dry run), then applied.

Any kind the cluster serves is accepted (the dynamic client finds it by apiVersion and kind). Namespaced
objects without a namespace go to the run's own namespace. Everything is validated server-side before
anything is created, so bad input changes nothing; CEL errors are reported with expression and position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException
from kubernetes.dynamic.exceptions import ResourceNotFoundError

from testbed.kube.apiviews import dynamic_client
from testbed.kube.namespaces import create_namespace
from testbed.outcomes.cel import error_position

# Creation order: what others refer to first (namespaces, classes, claims), workloads last.
ORDER = ("Namespace", "DeviceClass", "ResourceClaimTemplate", "ResourceClaim")
WORKLOAD_KINDS = ("Pod", "Deployment", "ReplicaSet", "Job", "StatefulSet", "DaemonSet")
_EXPRESSION = re.compile(r'Invalid value: "((?:[^"\\]|\\.)*)": (?:compilation failed: )?')


class ManifestError(ValueError):
    """A manifest that cannot be applied; the message is one line naming the file and object."""


@dataclass(frozen=True)
class Manifest:
    """One YAML document and where it came from."""

    source: str  # file:index
    body: dict

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def name(self) -> str:
        return self.body["metadata"]["name"]

    def label(self) -> str:
        return f"{self.source} ({self.kind} {self.name})"


@dataclass
class Applied:
    """What a run created: namespaces (its own and the user's) and cluster-scoped objects, for clean-up."""

    namespaces: list[str] = field(default_factory=list)
    created_namespaces: list[str] = field(default_factory=list)
    cluster_objects: list[tuple[str, str, str]] = field(default_factory=list)  # apiVersion, kind, name
    manifests: list[Manifest] = field(default_factory=list)


def load(paths: Iterable[str | Path]) -> list[Manifest]:
    """Every document of every file (directories: their *.yaml and *.yml files, sorted), in creation order."""
    found: list[Manifest] = []
    for path in paths:
        path = Path(path)
        files = sorted([*path.glob("*.yaml"), *path.glob("*.yml")]) if path.is_dir() else [path]
        if path.is_dir() and not files:
            raise ManifestError(f"{path}: no *.yaml files in this directory")
        for file in files:
            found += _load_file(file)
    if not found:
        raise ManifestError("no manifests: the files hold no YAML documents")
    rank = {kind: i for i, kind in enumerate(ORDER)}
    return sorted(found, key=lambda m: rank.get(m.kind, len(ORDER)))


def _load_file(file: Path) -> list[Manifest]:
    try:
        docs = list(yaml.safe_load_all(file.read_text()))
    except OSError as exc:
        raise ManifestError(f"cannot read {file}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        raise ManifestError(f"{file} is not valid YAML: {' '.join(str(exc).split())}") from exc
    except ValueError as exc:  # a value YAML parses but Python refuses: an integer of over 4,300 digits, a 13th month
        raise ManifestError(f"{file} has a value that cannot be read ({str(exc).split(';')[0]}); valid: Kubernetes YAML manifests") from exc
    manifests = []
    for index, doc in enumerate(docs, 1):
        if doc is None:
            continue
        where = f"{file}:{index}"
        if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
            raise ManifestError(f"{where}: not a Kubernetes object; each document needs apiVersion, kind and metadata.name")
        if not isinstance(doc.get("metadata"), dict) or not doc["metadata"].get("name"):
            raise ManifestError(f"{where}: {doc['kind']} without metadata.name; generateName is not supported, give a name")
        manifests.append(Manifest(where, doc))
    return manifests


def describe_api_error(manifest: Manifest, exc: ApiException) -> str:
    """The apiserver's refusal as one line; CEL compile errors as expression, position and message."""
    try:
        import json

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


class Applier:
    """Applies manifests through the dynamic client into a run namespace."""

    def __init__(self, api: client.ApiClient, namespace: str) -> None:
        self.api = api
        self.namespace = namespace
        self.dynamic = dynamic_client(api)

    def _resource(self, manifest: Manifest):
        try:
            return self.dynamic.resources.get(api_version=manifest.body["apiVersion"], kind=manifest.kind)
        except ResourceNotFoundError as exc:
            raise ManifestError(f"{manifest.label()}: this cluster serves no {manifest.kind} in "
                                f"{manifest.body['apiVersion']}") from exc

    def _namespace_of(self, manifest: Manifest, resource) -> str | None:
        if not resource.namespaced:
            return None
        return manifest.body["metadata"].get("namespace") or self.namespace

    def check(self, manifests: list[Manifest]) -> None:
        """Server-side dry run of every manifest (in the run namespace, which exists); ManifestError on the first refusal."""
        for manifest in manifests:
            resource = self._resource(manifest)
            body = _without_namespace(manifest.body) if resource.namespaced else manifest.body
            try:
                resource.create(body=body, namespace=self.namespace if resource.namespaced else None, dry_run="All")
            except ApiException as exc:
                if exc.status == 409:
                    continue  # exists already (e.g. a DeviceClass the bed installs): apply will say so
                raise ManifestError(describe_api_error(manifest, exc)) from exc

    def apply(self, manifests: list[Manifest]) -> Applied:
        """Create every manifest in order; user namespaces are created if the files do not create them."""
        applied = Applied(namespaces=[self.namespace], manifests=list(manifests))
        core = client.CoreV1Api(self.api)
        existing = {n.metadata.name for n in core.list_namespace().items}
        for manifest in manifests:
            resource = self._resource(manifest)
            namespace = self._namespace_of(manifest, resource)
            if manifest.kind == "Namespace":
                create_namespace(core, manifest.name, (manifest.body["metadata"].get("labels") or {}))
                applied.created_namespaces.append(manifest.name)
                applied.namespaces.append(manifest.name)
                existing.add(manifest.name)
                continue
            if namespace and namespace not in existing:
                create_namespace(core, namespace)
                applied.created_namespaces.append(namespace)
                existing.add(namespace)
            if namespace and namespace not in applied.namespaces:
                applied.namespaces.append(namespace)
            try:
                resource.create(body=manifest.body, namespace=namespace)
            except ApiException as exc:
                raise ManifestError(describe_api_error(manifest, exc)) from exc
            if namespace is None:
                applied.cluster_objects.append((manifest.body["apiVersion"], manifest.kind, manifest.name))
        return applied

    def remove(self, applied: Applied) -> None:
        """Delete what `apply` created: cluster-scoped objects and the namespaces it created (with their contents)."""
        core = client.CoreV1Api(self.api)
        for api_version, kind, name in reversed(applied.cluster_objects):
            try:
                self.dynamic.resources.get(api_version=api_version, kind=kind).delete(name=name)
            except ApiException as exc:
                if exc.status != 404:
                    raise
        for name in applied.created_namespaces:
            try:
                core.delete_namespace(name, body=client.V1DeleteOptions(grace_period_seconds=0))
            except ApiException as exc:
                if exc.status != 404:
                    raise


def _without_namespace(body: dict) -> dict:
    metadata = {k: v for k, v in body["metadata"].items() if k != "namespace"}
    return dict(body, metadata=metadata)


def expected_pods(manifests: Iterable[Manifest]) -> int:
    """How many pods the workloads will have once their controllers have acted (DaemonSets aside)."""
    total = 0
    for manifest in manifests:
        spec = manifest.body.get("spec") or {}
        if manifest.kind == "Pod":
            total += 1
        elif manifest.kind in ("Deployment", "ReplicaSet"):
            total += int(spec.get("replicas", 1))
        elif manifest.kind == "StatefulSet":
            # OrderedReady creates a pod only once the one before runs: one is all that is sure to exist
            total += int(spec.get("replicas", 1)) if spec.get("podManagementPolicy") == "Parallel" else 1
        elif manifest.kind == "Job":
            parallelism = int(spec.get("parallelism", 1))
            total += min(parallelism, int(spec.get("completions", parallelism)))
    return total
