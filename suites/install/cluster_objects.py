"""What the install suites share: the CLI, kubectl, the object list a clean uninstall must leave as it was,
and a claim's pod for the fake fleet."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

CLI = [sys.executable, "-m", "testbed.cli"]
# "full": install into a live bed (a minute on KWOK, minutes on kind); `nox -s tests` renders, lints and
# checks the chart (test_chart.py)
FULL_ENV = "DRA_TESTBED_INSTALL"
RELEASE = "hc"
KUBECTL_MINOR = "1.34"  # any kubectl of the toolchain speaks to every bed minor this suite runs


def run_cli(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`dra-testbed ARGS`; asserts exit 0 unless `check` is false."""
    out = subprocess.run([*CLI, *args], capture_output=True, text=True)
    assert not check or out.returncode == 0, out.stderr
    return out


def kubectl(kubeconfig: Path, *args: str) -> str:
    """The toolchain's kubectl against `kubeconfig`; its stdout (CalledProcessError on failure)."""
    from testbed.toolchain.resolve import ensure

    binary = ensure(KUBECTL_MINOR, ["kubectl"], allow_download=False, allow_build=False).path("kubectl")
    return subprocess.run([str(binary), "--kubeconfig", str(kubeconfig), *args], capture_output=True, text=True, check=True).stdout


def objects(kubeconfig: Path) -> set[str]:
    """Every object of every listable resource but Events (the cluster's own log, not state)."""
    found = set()
    for resource in kubectl(kubeconfig, "api-resources", "--verbs=list", "-o", "name").split():
        if resource.startswith("events"):
            continue
        found |= {f"{resource} {line}" for line in kubectl(kubeconfig, "get", resource, "-A", "-o", "name").split()}
    return found


# a claim of one GPU and its pod, which tolerates the fleet's taint and asks for a node of the release
POD = f"""
apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {{name: hc-claim, namespace: default}}
spec:
  devices:
    requests:
    - name: gpu
      exactly: {{deviceClassName: gpu.nvidia.com, count: 1}}
---
apiVersion: v1
kind: Pod
metadata: {{name: hc-pod, namespace: default}}
spec:
  nodeSelector: {{dra-fake-gpus.io/release: {RELEASE}}}
  tolerations: [{{key: dra-testbed.io/fake-node, operator: Exists, effect: NoSchedule}}]
  resourceClaims: [{{name: gpu, resourceClaimName: hc-claim}}]
  containers: [{{name: c, image: busybox, resources: {{claims: [{{name: gpu}}]}}}}]
"""
