"""KWOK's pod and node Stages with one change: a pod holding ResourceClaims turns Running only once its
claims are prepared.

kwokctl uses its default Stages (node-initialize, node-heartbeat-with-lease, pod-ready, pod-complete,
pod-delete) only when the configuration names none, so ours must carry all of them. They are read from
the kwok Go module of the pinned release (downloaded through the module proxy if the build did not
leave it in the cache), never written out here. The change: `pod-ready` only takes pods without
`.spec.resourceClaims` and without a claim for extended resources (`.status.extendedResourceClaimStatus`,
a `nvidia.com/gpu` pod); `pod-ready-claims-prepared` and `pod-ready-extended-claim-prepared`, otherwise the
same, take the others once the stand-in kubelet (testbed.kubelet) has marked them with PREPARED_ANNOTATION
after NodePrepareResources succeeded for all their claims. A pod whose prepare fails stays Pending, as on a kubelet.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import tempfile
from pathlib import Path

import yaml

from hostenv.goenv import go_binary, go_env
from testbed.errors import EnvironmentProblem
from testbed.kubelet import PREPARED_ANNOTATION

MODULE = "sigs.k8s.io/kwok"
# the Stages kwokctl adds when the config has none (pkg/kwokctl/runtime/cluster.go, lease on by default)
DEFAULT_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
                  "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")
GATED_STAGE = "pod-ready-claims-prepared"
GATED_EXTENDED_STAGE = "pod-ready-extended-claim-prepared"
OWN_CLAIMS, EXTENDED_CLAIM = ".spec.resourceClaims", ".status.extendedResourceClaimStatus"  # DRAExtendedResource's claim
# "kwok" leaves kwokctl's own Stages in place (pods Running at once, prepared or not): only for the test
# that shows the gate is what keeps a pod with a failed prepare Pending
STAGES_ENV = "DRA_TESTBED_KWOK_STAGES"
STAGE_CHOICES = ("gated", "kwok")


class StagesError(EnvironmentProblem):
    """kwok's default Stages could not be read."""


def module_dir(version: str) -> Path:
    """The kwok module source of `version` in the Go module cache, downloaded if absent."""
    cached = Path(go_env()["GOMODCACHE"]) / f"{MODULE}@{version}"
    if (cached / "kustomize" / "stage").is_dir():
        return cached
    with tempfile.TemporaryDirectory() as work:  # outside any module, so `go mod download` takes module@version
        out = subprocess.run([go_binary(), "mod", "download", "-json", f"{MODULE}@{version}"], cwd=work,
                             env=go_env(), capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        raise StagesError(f"go mod download {MODULE}@{version} failed: {(out.stderr or out.stdout).strip()[-300:]}")
    return Path(json.loads(out.stdout)["Dir"])


def default_stages(version: str) -> list[dict]:
    """kwokctl's default Stages of kwok `version`, as objects."""
    root = module_dir(version) / "kustomize" / "stage"
    try:
        return [yaml.safe_load((root / name).read_text()) for name in DEFAULT_STAGES]
    except OSError as exc:
        raise StagesError(f"kwok {version} has no default stage {exc.filename}") from exc


def gated_stages(version: str) -> list[dict]:
    """The default Stages with pod-ready split on prepared claims (see the module docstring)."""
    out = []
    for stage in default_stages(version):
        if stage["metadata"]["name"] != "pod-ready":
            out.append(stage)
            continue
        plain = copy.deepcopy(stage)
        plain["spec"]["selector"]["matchExpressions"] += [{"key": OWN_CLAIMS, "operator": "DoesNotExist"},
                                                          {"key": EXTENDED_CLAIM, "operator": "DoesNotExist"}]
        out.append(plain)
        # two gated stages with disjoint selectors: one for pods with claims of their own, one for pods whose only
        # claim is the scheduler's for their extended resources (set before binding, so seen with the node)
        for name, holds in ((GATED_STAGE, [{"key": OWN_CLAIMS, "operator": "Exists"}]),
                            (GATED_EXTENDED_STAGE, [{"key": OWN_CLAIMS, "operator": "DoesNotExist"},
                                                    {"key": EXTENDED_CLAIM, "operator": "Exists"}])):
            gated = copy.deepcopy(stage)
            gated["metadata"]["name"] = name
            gated["spec"]["selector"]["matchExpressions"] += [
                *holds, {"key": f'.metadata.annotations["{PREPARED_ANNOTATION}"]', "operator": "In", "values": ["true"]}]
            out.append(gated)
    return out


def stages_yaml(version: str, environ: dict[str, str] | None = None) -> str:
    """The Stages as YAML documents to append to a kwokctl configuration: the gated ones, or none (kwokctl's
    defaults) when $DRA_TESTBED_KWOK_STAGES is `kwok`; StagesError names the valid values otherwise."""
    choice = (os.environ if environ is None else environ).get(STAGES_ENV, "gated")
    if choice not in STAGE_CHOICES:
        raise StagesError(f"${STAGES_ENV}={choice!r}; valid: {', '.join(STAGE_CHOICES)}")
    if choice == "kwok":
        return ""
    return "".join("---\n" + yaml.safe_dump(s, sort_keys=False) for s in gated_stages(version))
