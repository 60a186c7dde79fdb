"""clusters/examples on the default test bed (mixed H100/B200, whole GPUs), through the shared apply/settle/explain."""

from __future__ import annotations

from pathlib import Path

import pytest

import re

from testbed.outcomes.manifests import load
from testbed.outcomes.render import labels
from testbed.outcomes.run import run_manifests
from testbed.pytest.plugin import TestBed

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "clusters" / "examples"

# file -> pod (or workload) -> the board it must land on ("*": any, "" for pending); whole-GPU examples only (the bed has no MIG)
EXPECTED = {
    "whole-gpu-by-memory.yaml": {"train-70gi": "*", "train-100gi": "b200-180gb"},  # 70Gi: an H100 or a B200
    "shared-claim.yaml": {"producer": "*", "consumer": "*"},
    "deployment.yaml": {"serving": "h100-80gb"},
    "legacy-nvidia-gpu.yaml": {"legacy-cuda": "*"},
    "topology-one-pcie-root.yaml": {"allreduce-4": "*"},
    "cannot-schedule.yaml": {"too-big": ""},
}


@pytest.mark.parametrize("example", sorted(EXPECTED))
def test_example(example: str, testbed: TestBed, record_proof) -> None:
    result = run_manifests(testbed.api, load([EXAMPLES / example]), fleet="mixed-h100-b200")
    assert result.settled
    landed = []
    names = labels(result)
    for pod in result.pods:
        wanted = EXPECTED[example][pod.owner.split("/")[-1] if pod.owner else pod.name]
        if wanted == "":
            assert pod.verdict == "pending" and pod.may_pend and pod.scheduler and pod.reasons, pod
            landed.append(f"{names[id(pod)]}: pending ({pod.reasons[0].rsplit('; ', 1)[-1]})")
            continue
        assert pod.verdict == "scheduled", (pod.name, pod.scheduler, pod.reasons)
        assert wanted in ("*", pod.board), (pod.name, pod.board)
        landed.append(f"{names[id(pod)]}: {pod.node} {','.join(a.device for a in pod.allocations)}")
    assert result.ok
    claims = [m.body for m in load([EXAMPLES / example]) if m.kind in ("ResourceClaimTemplate", "ResourceClaim")]
    record_proof("claim", "; ".join(_asked(c) for c in claims) or "nvidia.com/gpu: 1 (device-plugin style)")
    record_proof("landed", "; ".join(landed))


def _asked(claim: dict) -> str:
    spec = claim["spec"].get("spec", claim["spec"])
    requests = []
    for request in spec["devices"]["requests"]:
        exactly = request.get("exactly") or {}
        selectors = [s["cel"]["expression"] for s in exactly.get("selectors") or []]
        count = f"{exactly['count']} x " if exactly.get("count", 1) != 1 else ""
        requests.append(f"{claim['metadata']['name']}: {count}{exactly.get('deviceClassName', '?')}"
                        + (f" where {' && '.join(map(_short, selectors))}" if selectors else "")
                        + "".join(f", same {c['matchAttribute']}" for c in spec["devices"].get("constraints") or []))
    return ", ".join(requests)


def _short(expression: str) -> str:
    """`device.capacity['d'].memory.compareTo(quantity('70Gi')) >= 0` as `memory >= 70Gi`, for the table."""
    expression = re.sub(r"device\.capacity\['[^']+'\]\.(\w+)\.compareTo\(quantity\('([^']+)'\)\) (\S+) 0", r"\1 \3 \2", expression)
    return re.sub(r"device\.attributes\['[^']+'\]\.(\w+)", r"\1", expression)
