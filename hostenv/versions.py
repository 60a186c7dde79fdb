"""Which release of each project goes with each supported Kubernetes minor."""

from __future__ import annotations

from dataclasses import dataclass

from hostenv.errors import BadInputError

DEFAULT_MINOR = "1.34"


class UnknownVersionError(BadInputError):
    """A Kubernetes minor the test bed does not support."""


@dataclass(frozen=True)
class Release:
    """Pinned versions of everything a cluster of one Kubernetes minor needs."""

    minor: str
    kubernetes: str  # patch release of k8s.io/kubernetes, e.g. "v1.34.4"
    etcd: str  # etcd 3.6 patch release that kubeadm pairs with this minor
    kwok: str
    kind: str

    @property
    def prerelease(self) -> bool:
        """Whether `kubernetes` is a pre-release (e.g. "v1.38.0-beta.0"): its lane reports without gating.
        The version string is the one place that says so, so the lane becomes a normal minor the day the
        pin moves to the release."""
        return "-" in self.kubernetes

    @property
    def label(self) -> str:
        """The minor as listings show it: "1.38 (pre-release v1.38.0-beta.0)" for a pre-release."""
        return f"{self.minor} (pre-release {self.kubernetes})" if self.prerelease else self.minor

    @property
    def staging(self) -> str:
        """Version of the published k8s.io/* staging modules, e.g. "v0.34.4"."""
        return "v0." + self.kubernetes.removeprefix("v1.")

    def project_version(self, project: str) -> str:
        """The pinned version of `kubernetes` (and its `kubernetes-test` binaries), `etcd`, `kwok`, `kind`, or of
        a renderer (`helm`, `kustomize`: one version for every minor)."""
        if project in RENDERERS:
            return RENDERERS[project]
        return {"kubernetes": self.kubernetes, "kubernetes-test": self.kubernetes, "etcd": self.etcd, "kwok": self.kwok,
                "kind": self.kind}[project]


# The tools `try -k` and `--helm` render manifests with; they only write YAML, so one version serves every
# minor. Helm 4 is Helm's current major; kustomize v5.8.3 needs Go 1.27,
# v5.8.2 is the newest that builds with Go 1.26.
# Kueue (a tool, not a renderer, kept here for the same reason: one build serves every minor) is v0.17.0, the
# newest the proxy serves; its DRA support (deviceClassMappings) is what the kueue suite exercises.
RENDERERS: dict[str, str] = {"helm": "v4.3.2", "kustomize": "v5.8.2", "kueue": "v0.17.0"}

# Patch releases are the newest that the Go module proxy serves for each minor; etcd follows
# kubeadm's pairing; kind v0.30.0 is the first kind that defaults to a 1.34 node image.
# 1.38 is ahead of its release: the newest pre-release the proxy serves. Its modules declare go 1.27.0, so
# hostenv.goenv lets Go fetch that toolchain. Its kubeadm pairs etcd 3.7.1, but its API server runs on 1.37's
# cached etcd v3.6.8 (a KWOK bed, measured); kwok v0.8.0 and kind v0.33.0 are the newest the proxy serves.
RELEASES: dict[str, Release] = {
    r.minor: r
    for r in (
        Release("1.34", "v1.34.4", "v3.6.5", "v0.8.0", "v0.30.0"),
        Release("1.35", "v1.35.4", "v3.6.5", "v0.8.0", "v0.32.0"),
        Release("1.36", "v1.36.3", "v3.6.8", "v0.8.0", "v0.33.0"),
        Release("1.37", "v1.37.2", "v3.6.8", "v0.8.0", "v0.33.0"),
        Release("1.38", "v1.38.0-beta.0", "v3.6.8", "v0.8.0", "v0.33.0"),
    )
}


def release_for(minor: str) -> Release:
    """The pinned release for a Kubernetes minor such as "1.34" (a leading "v" is accepted)."""
    key = minor.removeprefix("v")
    if key not in RELEASES:
        raise UnknownVersionError(
            f"unknown Kubernetes minor {minor!r}; valid: {', '.join(sorted(RELEASES))}"
        )
    return RELEASES[key]
