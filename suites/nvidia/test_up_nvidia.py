"""`dra-testbed up --driver nvidia` on KWOK: NVIDIA's plugin serves every node, the stand-in kubelet prepares
pods' claims (then the pod runs), DeviceClasses are the chart's, and `down` leaves no process, socket directory or file."""

from __future__ import annotations

import time
import uuid
from pathlib import Path

import pytest
from kubernetes import client, config

from suites.nvidia.conftest import plugin_absent_env
from testbed.cli.main import main
from testbed.kubelet import PREPARED_ANNOTATION
from testbed.drivers.nvidia.plugin import DRIVER

pytestmark = pytest.mark.cluster


def _processes(text: str) -> list[str]:
    """Command lines of live processes that mention `text`."""
    found = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            args = cmdline.read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if text in args:
            found.append(args)
    return found


def test_up_with_nvidias_driver_prepares_pods_and_down_cleans_up(nvidia_binary, capsys) -> None:
    name = f"nvup-{uuid.uuid4().hex[:6]}"
    assert main(["up", "--name", name, "--driver", "nvidia", "--driver-binary", str(nvidia_binary),
                 "--node", f"{name}-d=h100-80gb:2:dynamic-mig", "--node", f"{name}-w=b200-180gb:1:whole"]) == 0
    kubeconfig = Path(capsys.readouterr().out.strip().splitlines()[-1])
    api = config.new_client_from_config(config_file=str(kubeconfig))
    try:
        resource, core = client.ResourceV1Api(api), client.CoreV1Api(api)
        slices = resource.list_resource_slice().items
        assert {s.spec.node_name for s in slices} == {f"{name}-d", f"{name}-w"}
        assert all(s.spec.driver == DRIVER and not (s.metadata.labels or {}) for s in slices), "NVIDIA's slices, not ours"
        assert {c.metadata.name for c in resource.list_device_class().items} == {"gpu.nvidia.com", "mig.nvidia.com", "vfio.gpu.nvidia.com"}
        assert len([p for p in _processes("gpu-kubelet-plugin") if name in p]) == 2

        core.create_namespaced_pod("default", {
            "metadata": {"name": "p"},
            "spec": {"containers": [{"name": "c", "image": "busybox", "resources": {"claims": [{"name": "g"}]}}],
                     "resourceClaims": [{"name": "g", "resourceClaimTemplateName": "one-mig"}]}})
        resource.create_namespaced_resource_claim_template("default", {
            "metadata": {"name": "one-mig"},
            "spec": {"spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "mig.nvidia.com"}}]}}}})
        deadline = time.monotonic() + 120
        while (core.read_namespaced_pod("p", "default").metadata.annotations or {}).get(PREPARED_ANNOTATION) != "true":
            assert time.monotonic() < deadline, "the stand-in kubelet did not prepare the pod's claim"
            time.sleep(0.3)
        while core.read_namespaced_pod("p", "default").status.phase != "Running":  # KWOK's gate lets it run now
            assert time.monotonic() < deadline, "the prepared pod did not turn Running"
            time.sleep(0.3)
    finally:
        api.close()
        assert main(["down", "--name", name]) == 0
    assert not [p for p in _processes(name) if "gpu-kubelet-plugin" in p or "testbed.kubelet" in p], "processes left"
    assert not any(name in line for line in Path("/proc/self/mounts").read_text().splitlines())


def test_up_with_nvidia_and_no_binary_is_one_line(monkeypatch, capsys, tmp_path) -> None:
    for name, value in plugin_absent_env(tmp_path).items():
        monkeypatch.setenv(name, value)
    assert main(["up", "--name", "never", "--driver", "nvidia", "--node", "n=h100-80gb:1:whole"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "DRA_TESTBED_NVIDIA_PLUGIN" in err[0] and "--driver-binary" in err[0]
