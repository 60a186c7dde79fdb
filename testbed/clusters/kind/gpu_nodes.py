"""What a kind GPU worker has that a plain node lacks, as a real GPU node has it from its kernel module.

- NVIDIA's device nodes in the node's /dev (nvidia<minor>, nvidiactl, nvidia-uvm, the MIG config and
  monitor caps): a privileged driver container gets them all, as on a real node, and the fake NVML in
  it sees every GPU. Pods get only the nodes their CDI devices name, and see only those GPUs.
- The node's fake-GPU state visible read-only at the same path in every container (through containerd's
  base OCI spec), as the GPUs' kernel state is to every process on a real node. A container that is
  given a GPU's device nodes and NVIDIA's libnvidia-ml mount (CDI) then finds it, with no variable set.
"""

from __future__ import annotations

import json
import shlex
from pathlib import Path

from fake_gpus.machine.driver_root import device_nodes
from fake_gpus.nvml.state import NODE_STATE_DIR
from testbed.clusters.base import ClusterError
from testbed.host.docker.dockerd import docker

BASE_SPEC_IN_NODE = "/etc/containerd/cri-base.json"  # base_runtime_spec of the node's containerd config


def state_mount() -> dict:
    """The base spec's mount of the node's fake-GPU state: read-only, so pods can look but never write."""
    return {"destination": NODE_STATE_DIR, "type": "bind", "source": NODE_STATE_DIR, "options": ["rbind", "ro", "nosuid", "nodev"]}


def write_base_spec(node_image: str, out: Path) -> Path:
    """containerd's base OCI spec of `node_image` with the state mount added, written to `out`."""
    got = docker("run", "--rm", "--pull", "never", "--entrypoint", "cat", node_image, BASE_SPEC_IN_NODE, check=False)
    if got.returncode != 0:
        raise ClusterError(f"node image {node_image} has no {BASE_SPEC_IN_NODE} to add the GPU state to: {got.stderr.strip()[-200:]}")
    spec = json.loads(got.stdout)
    spec["mounts"] = [m for m in spec.get("mounts", []) if m.get("destination") != NODE_STATE_DIR] + [state_mount()]
    out.write_text(json.dumps(spec, indent=1) + "\n")
    return out


def make_device_nodes(container: str, gpu_minors: list[int]) -> None:
    """Create the node's NVIDIA device nodes in the /dev of its container."""
    steps = ["mkdir -p /dev/nvidia-caps"]
    for name, (major, minor) in device_nodes(gpu_minors, mig_manager=True).items():
        path = shlex.quote(f"/dev/{name}")
        steps.append(f"rm -f {path} && mknod -m 666 {path} c {major} {minor}")
    out = docker("exec", container, "sh", "-c", " && ".join(steps), check=False)
    if out.returncode != 0:
        raise ClusterError(f"could not create NVIDIA's device nodes on {container}: {(out.stderr or out.stdout).strip()[-200:]}")
