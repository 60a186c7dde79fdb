"""`dra-testbed gpu fail|heal` on a kind bed: the record is appended on the host side of the node's state
mount (testbed/cli/gpu_health.py), and NVML inside the node container reads it through that mount. The
reader is the fake nvidia-smi the node carries beside its libnvidia-ml (NVML_LIB_IN_NODE): `-L` asks
every GPU for its handle, which a lost GPU refuses with NVML_ERROR_GPU_IS_LOST."""

from __future__ import annotations

import subprocess

import pytest

from testbed.cli.main import main
from testbed.clusters.kind.nodes import NVML_LIB_IN_NODE

pytestmark = [pytest.mark.kind, pytest.mark.slow]

NODE = "gpu-whole"  # the kind bed's node of two whole H100s


def _smi_list(worker: str) -> subprocess.CompletedProcess:
    return subprocess.run(["docker", "exec", worker, f"{NVML_LIB_IN_NODE}/nvidia-smi", "-L"], capture_output=True,
                          text=True, timeout=60)


def test_a_lost_gpu_injected_on_the_host_is_lost_inside_the_node_until_healed(kind_bed) -> None:
    worker = kind_bed.worker(NODE)
    before = _smi_list(worker)
    assert before.returncode == 0 and before.stdout.count("GPU ") == 2, before.stdout + before.stderr
    # named by its Kubernetes (container) name here, by its layout name for the heal: both are accepted
    assert main(["gpu", "fail", "--name", kind_bed.cluster.name, worker, "1", "--lost"]) == 0
    try:
        lost = _smi_list(worker)
        assert lost.returncode != 0 and "GPU is lost" in lost.stderr, lost.stdout + lost.stderr
    finally:
        assert main(["gpu", "heal", "--name", kind_bed.cluster.name, NODE, "1"]) == 0  # the session bed goes on
    healed = _smi_list(worker)
    assert healed.stdout == before.stdout, healed.stderr
