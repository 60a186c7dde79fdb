"""CDI specs for prepared claims: one JSON spec file per claim, one CDI device per allocated device."""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass
from pathlib import Path

from fake_gpus.node.device_majors import NVIDIA_CAPS_MAJOR, NVIDIA_MAJOR, NVIDIA_UVM_MAJOR
from fake_gpus.node.driver_root import LIB_DIR, LINKER_NAME, SMI, SONAME, versioned_library

CDI_VERSION = "0.6.0"
CDI_CLASS = "device"


@dataclass(frozen=True)
class FakeNvmlMounts:
    """What a container needs to run nvidia-ml-py against the fake library: paths as the NODE sees them.

    Mounted at the same path inside the container, so the environment is valid on both sides (and a
    process on the node given the same environment sees what the container sees)."""

    lib_dir: Path | None
    state_dir: Path | None

    def env(self) -> list[str]:
        env = []
        if self.state_dir is not None:
            env.append(f"FAKE_NVML_STATE_DIR={self.state_dir}")
        if self.lib_dir is not None:
            env.append(f"LD_LIBRARY_PATH={self.lib_dir}")
        return env

    def mounts(self) -> list[dict]:
        mounts = []
        if self.lib_dir is not None:
            mounts.append({"hostPath": str(self.lib_dir), "containerPath": str(self.lib_dir), "options": ["ro", "nosuid", "nodev", "rbind"]})
        if self.state_dir is not None:
            # read-write: every NVML client takes the state directory's flock
            mounts.append({"hostPath": str(self.state_dir), "containerPath": str(self.state_dir), "options": ["rw", "nosuid", "nodev", "rbind"]})
        return mounts


@dataclass(frozen=True)
class DriverRootMounts:
    """The node's driver root handed to every container of a claim, as NVIDIA's CDI spec hands out a real
    one: `/usr/bin/nvidia-smi` and `/usr/lib/x86_64-linux-gnu/libnvidia-ml.so.<driverVersion>`, read-only,
    and the `libnvidia-ml.so.1` and `libnvidia-ml.so` names beside it. NVIDIA's spec makes those two names
    as symlinks with its nvidia-cdi-hook (`create-symlinks`, then `update-ldcache`); ours mounts the same
    file under them, so it needs no hook binary on the node and a glibc image finds the library in its
    system library directory, as with NVIDIA's. Quickstart pods (`nvidia-smi -L` in a plain image) run
    unchanged on either driver."""

    host_root: Path  # the driver root as the node (its container runtime) sees it
    library: str  # libnvidia-ml.so.<driverVersion>

    @classmethod
    def find(cls, root: Path, host_root: Path | None = None) -> "DriverRootMounts | None":
        """The mounts of driver root `root` (as this process sees it; `host_root` where the node sees it),
        None when it holds no nvidia-smi and versioned libnvidia-ml."""
        library = versioned_library(root)
        if library is None or not (root / SMI).is_file():
            return None
        return cls(host_root or root, library)

    def mounts(self) -> list[dict]:
        options = ["ro", "nosuid", "nodev", "rbind", "rprivate"]  # NVIDIA's options
        library = self.host_root / LIB_DIR / self.library
        files = [(self.host_root / SMI, SMI), (library, LIB_DIR / self.library), (library, LIB_DIR / SONAME), (library, LIB_DIR / LINKER_NAME)]
        return [{"hostPath": str(host), "containerPath": f"/{inside}", "options": options} for host, inside in files]


def cdi_kind(driver: str) -> str:
    """`k8s.<driver>/device`: the vendor part is the driver name, prefixed as the kubelet helpers do."""
    return f"k8s.{driver}/{CDI_CLASS}"


def cdi_device_name(claim_uid: str, device_name: str) -> str:
    """Unique across claims: the same device may be prepared again for a later claim before cleanup."""
    return f"{claim_uid}-{device_name}"


def cdi_device_id(driver: str, claim_uid: str, device_name: str) -> str:
    return f"{cdi_kind(driver)}={cdi_device_name(claim_uid, device_name)}"


def spec_file_name(driver: str, claim_uid: str) -> str:
    return f"{cdi_kind(driver).replace('/', '_')}-claim_{claim_uid}.json"


def visibility_variable(claim_uid: str, device_name: str) -> str:
    """The per-device variable the fake NVML unions into its view (see the library's core.c).

    A container with several claims gets the environment of every CDI device it uses, and the runtime
    keeps only the last value of a shared name such as NVIDIA_VISIBLE_DEVICES; one name per device
    keeps every claim's devices visible."""
    return "FAKE_NVML_VISIBLE_" + re.sub(r"[^A-Z0-9]", "_", cdi_device_name(claim_uid, device_name).upper())


@dataclass(frozen=True)
class DeviceNodes:
    """The device nodes a container using a device gets, as a real GPU driver hands them out: the GPU's
    /dev/nvidia<minor> and, for a MIG device, the nvidia-caps nodes of its GPU and compute instance. In
    a container the fake NVML shows exactly what these open (the FAKE_NVML_VISIBLE_* variables only
    narrow plain processes that are handed the spec's environment)."""

    gpu_minors: tuple[int, ...]
    caps_minors: tuple[int, ...] = ()

    def edits(self) -> list[dict]:
        nodes = [(f"/dev/nvidia{m}", NVIDIA_MAJOR, m) for m in self.gpu_minors]
        nodes += [("/dev/nvidiactl", NVIDIA_MAJOR, 255), ("/dev/nvidia-uvm", NVIDIA_UVM_MAJOR, 0), ("/dev/nvidia-uvm-tools", NVIDIA_UVM_MAJOR, 1)]
        nodes += [(f"/dev/nvidia-caps/nvidia-cap{m}", NVIDIA_CAPS_MAJOR, m) for m in self.caps_minors]
        return [{"path": path, "type": "c", "major": major, "minor": minor, "permissions": "rw"} for path, major, minor in nodes]


def build_spec(driver: str, claim_uid: str, devices: list[tuple[str, str, DeviceNodes]], mounts: FakeNvmlMounts,
               driver_root: DriverRootMounts | None = None, extra: dict[str, dict] | None = None) -> dict:
    """The spec of a claim; `devices` are (device name, the UUIDs a container using it must see, its device
    nodes). The driver root's files are the spec's own edits, as in NVIDIA's: any device of it brings them.
    `extra`: more env and mounts by device name (a sharing strategy's, e.g. an MPS daemon's directories)."""
    extra = extra or {}
    spec: dict = {"cdiVersion": CDI_VERSION, "kind": cdi_kind(driver)}
    if driver_root is not None:
        spec["containerEdits"] = {"mounts": driver_root.mounts()}
    return {
        **spec,
        "devices": [
            {"name": cdi_device_name(claim_uid, name),
             "containerEdits": {"env": [f"NVIDIA_VISIBLE_DEVICES={visible}", f"{visibility_variable(claim_uid, name)}={visible}",
                                        *mounts.env(), *extra.get(name, {}).get("env", [])],
                                "deviceNodes": nodes.edits(),
                                "mounts": mounts.mounts() + extra.get(name, {}).get("mounts", [])}}
            for name, visible, nodes in devices
        ],
    }


def write_spec(cdi_dir: Path, file_name: str, spec: dict) -> Path:
    """Write atomically: the runtime may read the directory at any moment."""
    cdi_dir.mkdir(parents=True, exist_ok=True)
    path = cdi_dir / file_name
    tmp = cdi_dir / f".{file_name}.tmp"
    tmp.write_text(json.dumps(spec, indent=1) + "\n")
    os.replace(tmp, path)
    return path


def remove_spec(cdi_dir: Path, file_name: str) -> None:
    (cdi_dir / file_name).unlink(missing_ok=True)
