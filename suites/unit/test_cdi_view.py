"""testbed.kube.cdi_view: a container's view from CDI specs, the yardstick of the CDI parity test (suites/nvidia)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from testbed.kube.cdi_view import IN_IMAGE, container_view, read_specs

LIB = "/usr/lib/x86_64-linux-gnu"


def _by_hook(root: Path) -> dict:
    """A spec shaped as NVIDIA's: the library mounted once, its other names made by create-symlinks."""
    return {"cdiVersion": "0.5.0", "kind": "k8s.gpu.nvidia.com/device",
            "containerEdits": {"mounts": [{"hostPath": str(root / "libnvidia-ml.so.570.1"), "containerPath": f"{LIB}/libnvidia-ml.so.570.1"}],
                               "hooks": [{"hookName": "createContainer", "path": "/x/nvidia-cdi-hook",
                                          "args": ["nvidia-cdi-hook", "create-symlinks", "--link", "libnvidia-ml.so.570.1::" + f"{LIB}/libnvidia-ml.so.1",
                                                   "--link", f"{LIB}/libnvidia-ml.so.1::{LIB}/libnvidia-ml.so", "--link", "/opt/x::/usr/bin/y"]},
                                         {"hookName": "createContainer", "path": "/x/nvidia-cdi-hook", "args": ["nvidia-cdi-hook", "update-ldcache"]}],
                               "deviceNodes": [{"path": "/dev/nvidiactl"}]},
            "devices": [{"name": "c1-gpu-0", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=void"], "deviceNodes": [{"path": "/dev/nvidia0"}]}}]}


def _by_mounts(root: Path) -> dict:
    """The same files as our driver gives them: one mount per name."""
    lib = str(root / "libnvidia-ml.so.570.1")
    return {"cdiVersion": "0.6.0", "kind": "k8s.gpu.nvidia.com/device",
            "containerEdits": {"mounts": [{"hostPath": lib, "containerPath": f"{LIB}/{n}"} for n in
                                          ("libnvidia-ml.so.570.1", "libnvidia-ml.so.1", "libnvidia-ml.so")]},
            "devices": [{"name": "c2-gpu-0", "containerEdits": {"env": ["NVIDIA_VISIBLE_DEVICES=GPU-1"],
                                                                "deviceNodes": [{"path": "/dev/nvidia0"}, {"path": "/dev/nvidiactl"}]}}]}


def test_links_and_mounts_of_the_same_file_give_the_same_view(tmp_path: Path) -> None:
    (tmp_path / "libnvidia-ml.so.570.1").write_bytes(b"x")
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.json").write_text(json.dumps(_by_mounts(tmp_path)))
    (tmp_path / "a" / "two.yaml").write_text(yaml.safe_dump(_by_hook(tmp_path)))
    specs = read_specs(tmp_path / "a")
    hook = container_view(specs, ["k8s.gpu.nvidia.com/device=c1-gpu-0"])
    mounts = container_view(specs, ["k8s.gpu.nvidia.com/device=c2-gpu-0"])
    real = str((tmp_path / "libnvidia-ml.so.570.1").resolve())
    assert {p: h for p, h in hook.files.items() if p.startswith(LIB)} == mounts.files == {
        f"{LIB}/{n}": real for n in ("libnvidia-ml.so.570.1", "libnvidia-ml.so.1", "libnvidia-ml.so")}
    assert hook.files["/usr/bin/y"] == IN_IMAGE + "/opt/x"  # nothing mounts /opt/x: the image's own file, not the host's
    assert hook.device_nodes == mounts.device_nodes == {"/dev/nvidia0", "/dev/nvidiactl"}
    assert hook.env == {"NVIDIA_VISIBLE_DEVICES": "void"}


def test_a_missing_library_name_shows(tmp_path: Path) -> None:
    """The view differs when a spec leaves a name out (a driver mounting only the versioned file)."""
    (tmp_path / "libnvidia-ml.so.570.1").write_bytes(b"x")
    spec = _by_mounts(tmp_path)
    spec["containerEdits"]["mounts"] = spec["containerEdits"]["mounts"][:1]
    short = container_view([spec], ["k8s.gpu.nvidia.com/device=c2-gpu-0"])
    full = container_view([_by_hook(tmp_path)], ["k8s.gpu.nvidia.com/device=c1-gpu-0"])
    assert set(full.files) - set(short.files) >= {f"{LIB}/libnvidia-ml.so.1", f"{LIB}/libnvidia-ml.so"}


def test_an_unknown_device_is_an_error(tmp_path: Path) -> None:
    with pytest.raises(LookupError, match="0 definitions"):
        container_view([_by_mounts(tmp_path)], ["k8s.gpu.nvidia.com/device=nope"])
