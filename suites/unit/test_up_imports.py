"""`dra-testbed up` on KWOK starts kwokctl before it loads the Kubernetes client: the client (some 0.3 s of
imports on an idle machine, seconds on a loaded one) loads in a thread while the control plane starts.

Checked in a fresh interpreter: everything the command imports before kwokctl runs (the parser with every
subcommand, the error types `main` catches, the KWOK backend) must leave the client, gRPC and NVML unloaded."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HEAVY = ("kubernetes", "grpc", "pynvml", "matplotlib", "hypothesis")

UP_PATH = """
import json, sys
import testbed.cli.main as cli
cli.build_parser()
from fake_gpus.catalog import CatalogError
from testbed.host.docker.dockerd import DockerError
from testbed.clusters.kind.images.node_image import ImageBuildError
from testbed.clusters.kind.images.rootfs import RootfsError
from testbed.host.hostdeps import HostDepsMissing
from testbed.toolchain.resolve import ToolchainError
from testbed.clusters.registry import backend_class
backend_class("kwok")
print(json.dumps(sorted({name.split(".")[0] for name in sys.modules})))
"""


def _loaded(code: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr[-2000:]
    return set(json.loads(out.stdout.strip().splitlines()[-1]))


def test_up_on_kwok_imports_no_client_before_the_control_plane_starts() -> None:
    loaded = _loaded(UP_PATH)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


def test_the_kind_backend_still_loads_on_demand() -> None:
    loaded = _loaded("import json, sys\nfrom testbed.clusters.kind import KindCluster\n"
                     "print(json.dumps(sorted({n.split('.')[0] for n in sys.modules})))")
    assert "kubernetes" in loaded  # the lazy package attribute gives the real class, client and all
