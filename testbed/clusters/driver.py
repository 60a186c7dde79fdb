"""Which DRA driver runs on a cluster's GPU nodes: the seam between a backend and the driver under test.

A `DriverSpec` names the driver and how it runs: `ours` (this project's fake-GPU driver), `binary` (a
vendor's kubelet-plugin executable: on KWOK a process per node) or `image` (a vendor's image: on kind a
DaemonSet). Every backend honours the spec, or refuses a kind it cannot run with one line before it
starts anything.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from fake_gpus.driver.identity import DEFAULT_DRIVER, DRIVER_ENV, current_identity
from testbed.errors import BadInputError

KINDS = ("ours", "binary", "image")


class DriverSpecError(BadInputError):
    """A driver spec that cannot be honoured as given; the message is one line for the user."""


@dataclass(frozen=True)
class DriverSpec:
    """The driver of a cluster: `name` is the DRA driver name its ResourceSlices carry; `env` is added to
    the environment of every driver process (fault switches, vendor settings)."""

    kind: str = "ours"
    name: str = field(default_factory=lambda: current_identity().driver)  # $DRA_TESTBED_DRIVER_NAME or NVIDIA's
    path: str | None = None  # kind "binary": the kubelet-plugin executable
    image: str | None = None  # kind "image": the image reference
    env: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.kind not in KINDS:
            raise DriverSpecError(f"unknown driver kind {self.kind!r}; valid: {', '.join(KINDS)}")
        if self.kind == "binary" and not self.path:
            raise DriverSpecError("a driver of kind 'binary' needs the path of its kubelet-plugin executable")
        if self.kind == "image" and not self.image:
            raise DriverSpecError("a driver of kind 'image' needs an image reference")
        if self.path and self.kind != "binary":
            raise DriverSpecError(f"only a driver of kind 'binary' takes a path, not one of kind {self.kind!r}")
        if self.image and self.kind != "image":
            raise DriverSpecError(f"only a driver of kind 'image' takes an image, not one of kind {self.kind!r}")

    def with_env(self, env: dict[str, str]) -> DriverSpec:
        """This driver with `env` added to its environment."""
        return DriverSpec(self.kind, self.name, self.path, self.image, {**self.env, **env})

    def process_env(self) -> dict[str, str]:
        """What our driver's processes get added to their environment: `env`, and the driver name when
        it is not the default (ours reads it from $DRA_TESTBED_DRIVER_NAME)."""
        named = {DRIVER_ENV: self.name} if self.kind == "ours" and self.name != DEFAULT_DRIVER else {}
        return {**named, **self.env}

    def as_dict(self) -> dict:
        """The spec as recorded in a cluster's spec.json (and compared by --reuse-cluster)."""
        return {"kind": self.kind, "name": self.name, "path": self.path, "image": self.image, "env": dict(sorted(self.env.items()))}

    @classmethod
    def from_dict(cls, data: dict) -> DriverSpec:
        return cls(data.get("kind", "ours"), data.get("name") or current_identity().driver, data.get("path"), data.get("image"), dict(data.get("env") or {}))



def parse_driver(text: str, name: str | None = None, binary: str | None = None, image: str | None = None) -> DriverSpec:
    """`ours`, `nvidia` (NVIDIA's gpu-kubelet-plugin: the image `image`, else the executable `binary`, else
    $DRA_TESTBED_NVIDIA_PLUGIN), `binary:PATH` or `image:REFERENCE` (the CLI's --driver); DriverSpecError otherwise."""
    if binary and image:
        raise DriverSpecError("give either --driver-binary PATH or --driver-image IMAGE, not both")
    if image is not None:
        if text != "nvidia":
            raise DriverSpecError("--driver-image goes with --driver nvidia")
        if not image.strip():
            raise DriverSpecError("--driver-image needs an image reference, e.g. registry.k8s.io/dra-driver-nvidia/dra-driver-nvidia-gpu:v25.8.0")
        return DriverSpec("image", name or current_identity().driver, image=image)
    if text == "nvidia":
        from testbed.drivers.nvidia.binary import PluginNotFound, plugin_binary

        try:
            return DriverSpec("binary", name or current_identity().driver, path=str(plugin_binary(binary)))
        except PluginNotFound as exc:
            raise DriverSpecError(str(exc)) from exc
    if binary:
        raise DriverSpecError("--driver-binary goes with --driver nvidia")
    kind, _, target = text.partition(":")
    if kind not in KINDS:
        raise DriverSpecError(f"unknown driver {text!r}; valid: ours, nvidia, binary:PATH, image:REFERENCE")
    if kind == "binary":
        path = Path(target).expanduser()
        if not target or not path.is_file():
            raise DriverSpecError(f"driver binary {target!r} is not a file; give binary:PATH of a kubelet-plugin executable")
        return DriverSpec("binary", name or current_identity().driver, path=str(path.resolve()))
    if kind == "image":
        return DriverSpec("image", name or current_identity().driver, image=target or None)
    if target:
        raise DriverSpecError(f"driver 'ours' takes no argument, got {text!r}")
    return DriverSpec("ours", name or current_identity().driver)


def unsupported(backend: str, driver: DriverSpec, supported: tuple[str, ...]) -> str:
    """The one-line refusal of a backend that cannot run `driver`."""
    return f"the {backend} backend cannot run a driver of kind {driver.kind!r} yet; valid here: {', '.join(supported)}"
