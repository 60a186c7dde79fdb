"""Manifests as documents: each YAML document of the input, its object, and where it is in its file.

A document is composed once (PyYAML's node tree, which keeps every key's line) and constructed from that
tree, so a field the API server names can be shown at its line. `kind: List` documents (what `kubectl get
-o yaml` writes) give their items. An object is named by `metadata.name`, or by `metadata.generateName`
for the server to complete, as `kubectl create -f` accepts.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, TextIO

import yaml

from testbed.errors import BadInputError
from testbed.outcomes.inputs import InputError, Source, read_sources

# Creation order by kind (what the others need first); the applier refines it with the server's scopes.
ORDER = ("Namespace", "CustomResourceDefinition", "PriorityClass", "DeviceClass", "ServiceAccount", "ConfigMap",
         "Secret", "LimitRange", "ResourceQuota", "ResourceClaimTemplate", "ResourceClaim")
WORKLOAD_KINDS = ("Pod", "Deployment", "ReplicaSet", "Job", "StatefulSet", "DaemonSet", "CronJob")


class ManifestError(BadInputError):
    """A manifest that cannot be applied; the message is one line naming the file and object."""


@dataclass(frozen=True)
class Manifest:
    """One object of the input, where it came from, and its YAML node (for field lines)."""

    source: str  # file:document
    body: dict
    line: int = 0  # where the document starts in its file (1-based; 0 when built in code)
    node: yaml.Node | None = field(default=None, compare=False, repr=False)

    @property
    def kind(self) -> str:
        return self.body["kind"]

    @property
    def name(self) -> str:
        """The name given, or the generateName prefix the server will complete."""
        metadata = self.body.get("metadata") or {}
        return metadata.get("name") or metadata.get("generateName") or ""

    @property
    def generated(self) -> bool:
        return not (self.body.get("metadata") or {}).get("name")

    @property
    def file(self) -> str:
        return self.source.rsplit(":", 1)[0]

    def label(self) -> str:
        return f"{self.source} ({self.kind} {self.name}{'*' if self.generated else ''})"

    def at(self, line: int | None) -> str:
        """`file:line (Kind name)` for a line of this document."""
        return f"{self.file}:{line or self.line} ({self.kind} {self.name}{'*' if self.generated else ''})"


def load(paths: Iterable[str | Path], recursive: bool = False, stdin: TextIO | None = None) -> list[Manifest]:
    """Every object of every input (files, directories, `-` for standard input), in creation order."""
    found: list[Manifest] = []
    paths = list(paths)
    if not paths:
        raise ManifestError("no input: give manifest files, directories of them, or -f - for standard input")
    try:
        sources = read_sources(paths, recursive, stdin)
    except InputError as exc:
        raise ManifestError(str(exc)) from exc
    for source in sources:
        found += parse(source)
    if not found:
        raise ManifestError("no manifests: the input holds no YAML documents; give Kubernetes objects (apiVersion, kind, metadata.name)")
    rank = {kind: i for i, kind in enumerate(ORDER)}
    return sorted(found, key=lambda m: rank.get(m.kind, len(ORDER)))


def parse(source: Source) -> list[Manifest]:
    """The objects of one input's documents."""
    try:
        nodes = list(yaml.compose_all(source.text, Loader=yaml.SafeLoader))
        docs = [_construct(node) for node in nodes]
    except yaml.YAMLError as exc:
        raise ManifestError(f"{source.name} is not valid YAML: {' '.join(str(exc).split())}") from exc
    except ValueError as exc:  # a value YAML parses but Python refuses: an integer of over 4,300 digits, a 13th month
        raise ManifestError(f"{source.name} has a value that cannot be read ({str(exc).split(';')[0]}); valid: Kubernetes YAML manifests") from exc
    manifests: list[Manifest] = []
    for index, (node, doc) in enumerate(zip(nodes, docs), 1):
        if doc is None:
            continue
        where = f"{source.name}:{index}"
        if isinstance(doc, dict) and isinstance(doc.get("kind"), str) and doc["kind"].endswith("List") and isinstance(doc.get("items"), list):
            items = node.value[[k.value for k, _ in node.value].index("items")][1].value
            manifests += [_manifest(f"{where}.{i}", item, item_node) for i, (item, item_node) in enumerate(zip(doc["items"], items), 1)]
        else:
            manifests.append(_manifest(where, doc, node))
    return manifests


def _construct(node: yaml.Node | None) -> object:
    if node is None:
        return None
    return yaml.SafeLoader("").construct_document(node)


def _manifest(where: str, doc: object, node: yaml.Node) -> Manifest:
    if not isinstance(doc, dict) or not doc.get("apiVersion") or not doc.get("kind"):
        raise ManifestError(f"{where}: not a Kubernetes object; each document needs apiVersion, kind and metadata.name")
    metadata = doc.get("metadata")
    if not isinstance(metadata, dict) or not (metadata.get("name") or metadata.get("generateName")):
        raise ManifestError(f"{where}: {doc['kind']} without metadata.name or metadata.generateName; give it a name")
    return Manifest(where, doc, node.start_mark.line + 1, node)
