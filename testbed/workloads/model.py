"""Workload specs (claims, pods) as plain data: rendered to resource.k8s.io/v1 and core/v1 manifests,
read by the oracle, and stored in replay bundles.
"""

from __future__ import annotations

from dataclasses import dataclass

from testbed.workloads.selectors import AnySelector, from_description

ADMIN_NAMESPACE_LABEL = "resource.kubernetes.io/admin-access"
PLACEHOLDER_IMAGE = "registry.invalid/none:0"  # KWOK never pulls it


@dataclass(frozen=True)
class SubRequest:
    """What one (sub)request asks for: a class, selectors, ExactCount `count` or All, and maybe capacity of each
    device (consumable capacity: `capacity` pairs a capacity name with a quantity, e.g. ("memory", "4Gi"))."""

    name: str
    device_class: str
    selectors: tuple[AnySelector, ...] = ()
    all_devices: bool = False
    count: int = 1
    admin_access: bool = False  # only on `exactly` requests, as the API allows
    capacity: tuple[tuple[str, str], ...] = ()

    def body(self, driver: str) -> dict:
        body: dict = {"deviceClassName": self.device_class}
        if self.selectors:
            body["selectors"] = [{"cel": {"expression": s.cel(driver)}} for s in self.selectors]
        if self.all_devices:
            body["allocationMode"] = "All"
        else:
            body["allocationMode"] = "ExactCount"
            body["count"] = self.count
        if self.admin_access:
            body["adminAccess"] = True
        if self.capacity:
            body["capacity"] = {"requests": dict(self.capacity)}
        return body

    def describe(self) -> dict:
        described = {"name": self.name, "class": self.device_class, "selectors": [s.describe() for s in self.selectors],
                     "all": self.all_devices, "count": self.count, "adminAccess": self.admin_access}
        if self.capacity:  # left out when none, so bundles written before consumable capacity read the same
            described["capacity"] = dict(self.capacity)
        return described

    @classmethod
    def from_description(cls, data: dict) -> SubRequest:
        return cls(data["name"], data["class"], tuple(from_description(s) for s in data["selectors"]),
                   data["all"], data["count"], data["adminAccess"], tuple(sorted((data.get("capacity") or {}).items())))


@dataclass(frozen=True)
class Request:
    """`exactly` (one alternative) or `firstAvailable` (up to 8, tried in order)."""

    name: str
    alternatives: tuple[SubRequest, ...]
    first_available: bool = False

    def body(self, driver: str) -> dict:
        if self.first_available:
            return {"name": self.name, "firstAvailable": [dict(a.body(driver), name=a.name) for a in self.alternatives]}
        return {"name": self.name, "exactly": self.alternatives[0].body(driver)}

    def result_name(self, index: int) -> str:
        """The `request` field of an allocation result for alternative `index`."""
        return f"{self.name}/{self.alternatives[index].name}" if self.first_available else self.name

    def describe(self) -> dict:
        return {"name": self.name, "firstAvailable": self.first_available, "alternatives": [a.describe() for a in self.alternatives]}

    @classmethod
    def from_description(cls, data: dict) -> Request:
        return cls(data["name"], tuple(SubRequest.from_description(a) for a in data["alternatives"]), data["firstAvailable"])


@dataclass(frozen=True)
class MatchAttribute:
    """All devices of `requests` (all requests when empty) share the attribute's value."""

    attribute: str  # fully qualified, e.g. gpu.nvidia.com/productName
    requests: tuple[str, ...] = ()


@dataclass(frozen=True)
class ClaimSpec:
    requests: tuple[Request, ...]
    constraints: tuple[MatchAttribute, ...] = ()
    # opaque config for the driver, per request names (empty: every request); the scheduler copies it
    config: tuple[tuple[tuple[str, ...], dict], ...] = ()

    @property
    def admin(self) -> bool:
        return any(a.admin_access for r in self.requests for a in r.alternatives)

    def body(self, driver: str) -> dict:
        devices: dict = {"requests": [r.body(driver) for r in self.requests]}
        if self.constraints:
            devices["constraints"] = [
                dict({"matchAttribute": c.attribute}, **({"requests": list(c.requests)} if c.requests else {}))
                for c in self.constraints
            ]
        if self.config:
            devices["config"] = [self.config_entry(names, params, driver) for names, params in self.config]
        return {"devices": devices}

    @staticmethod
    def config_entry(names: tuple[str, ...], params: dict, driver: str) -> dict:
        entry: dict = {"opaque": {"driver": driver, "parameters": params}}
        if names:
            entry["requests"] = list(names)
        return entry

    def describe(self) -> dict:
        return {"requests": [r.describe() for r in self.requests],
                "constraints": [{"attribute": c.attribute, "requests": list(c.requests)} for c in self.constraints],
                "config": [{"requests": list(n), "parameters": p} for n, p in self.config]}

    @classmethod
    def from_description(cls, data: dict) -> ClaimSpec:
        return cls(tuple(Request.from_description(r) for r in data["requests"]),
                   tuple(MatchAttribute(c["attribute"], tuple(c["requests"])) for c in data["constraints"]),
                   tuple((tuple(c["requests"]), c["parameters"]) for c in data["config"]))


@dataclass(frozen=True)
class PodClaim:
    """A pod's claim entry: from a template of its own, or a shared standalone claim by name."""

    name: str
    template: ClaimSpec | None = None
    shared: str | None = None


@dataclass(frozen=True)
class PodSpec:
    name: str
    claims: tuple[PodClaim, ...]
    # containers, each naming the pod claims it uses (a claim may be used by several, or none)
    containers: tuple[tuple[str, ...], ...] = ()
    node: str | None = None  # pinned with a nodeSelector on the node's hostname label

    def template_name(self, claim: PodClaim) -> str:
        return f"{self.name}-{claim.name}"

    def manifests(self, driver: str, image: str = PLACEHOLDER_IMAGE, args: tuple[str, ...] = ()) -> list[dict]:
        """Templates first, then the pod (shared claims are created by whoever owns them). Its containers run
        `image` with `args` (real kubelets: an image the nodes already have; KWOK never pulls)."""
        docs = [
            {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaimTemplate",
             "metadata": {"name": self.template_name(c)}, "spec": {"spec": c.template.body(driver)}}
            for c in self.claims if c.template is not None
        ]
        containers = self.containers or (tuple(c.name for c in self.claims),)
        pod_claims = [
            {"name": c.name, "resourceClaimTemplateName": self.template_name(c)} if c.template is not None
            else {"name": c.name, "resourceClaimName": c.shared}
            for c in self.claims
        ]
        docs.append({
            "apiVersion": "v1", "kind": "Pod", "metadata": {"name": self.name, "labels": {"app.kubernetes.io/part-of": "dra-testbed-properties"}},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "containers": [
                    {"name": f"c{i}", "image": image, "resources": {"claims": [{"name": n} for n in names]},
                     **({"args": list(args), "imagePullPolicy": "IfNotPresent"} if image != PLACEHOLDER_IMAGE else {})}
                    for i, names in enumerate(containers)
                ],
                "resourceClaims": pod_claims,
                **({"nodeSelector": {"kubernetes.io/hostname": self.node}} if self.node else {}),
            },
        })
        return docs

    def describe(self) -> dict:
        return {"name": self.name, "node": self.node, "containers": [list(c) for c in self.containers],
                "claims": [{"name": c.name, "template": c.template.describe() if c.template else None, "shared": c.shared}
                           for c in self.claims]}

    @classmethod
    def from_description(cls, data: dict) -> PodSpec:
        claims = tuple(PodClaim(c["name"], ClaimSpec.from_description(c["template"]) if c["template"] else None, c["shared"])
                       for c in data["claims"])
        return cls(data["name"], claims, tuple(tuple(c) for c in data["containers"]), data.get("node"))


@dataclass(frozen=True)
class SharedClaim:
    """A standalone ResourceClaim that several pods reference by name."""

    name: str
    spec: ClaimSpec

    def manifest(self, driver: str) -> dict:
        return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim", "metadata": {"name": self.name},
                "spec": self.spec.body(driver)}

