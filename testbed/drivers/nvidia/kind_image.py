"""An image of NVIDIA's gpu-kubelet-plugin binary for kind, built offline on our Debian base image.

The image holds what NVIDIA's own image holds for the kubelet plugin and what the chart's DaemonSet
runs: /usr/bin/gpu-kubelet-plugin (the binary the user gave, unchanged) and /usr/bin/nvidia-cdi-hook
(ours, testbed/drivers/nvidia/cdi_hook.c; the plugin copies it to the node and names it in its CDI specs),
with bash and mount for the container's start command. The tag hashes the binary, the hook and the base.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from pathlib import Path

from testbed.host import progress
from testbed.host.docker.dockerd import ensure_engine, image_present
from testbed.clusters.kind.images.node_image import PATH_ENV, derive_image, drop_stale, ensure_base_image
from testbed.drivers.nvidia.cdi_hook import ensure_cdi_hook
from testbed.toolchain.store import sha256_of

PLUGIN_REPO = "dra-testbed/nvidia-gpu-kubelet-plugin"
PLUGIN_IN_IMAGE = "/usr/bin/gpu-kubelet-plugin"
HOOK_IN_IMAGE = "/usr/bin/nvidia-cdi-hook"


def plugin_reference(binary: Path, hook: Path, base: str) -> str:
    """The image's tag: a hash of the plugin binary, our hook and the base image."""
    text = f"{sha256_of(binary)} {sha256_of(hook)} {base}"
    return f"{PLUGIN_REPO}:{hashlib.sha256(text.encode()).hexdigest()[:12]}"


def ensure_plugin_image(binary: Path) -> str:
    """Build (once per input) and return the image of `binary` with our hook on the Debian base."""
    ensure_engine()
    base = ensure_base_image()
    hook = ensure_cdi_hook()
    reference = plugin_reference(binary, hook, base)
    if image_present(reference):
        return reference
    with progress.step(f"building {reference} from {binary}"), tempfile.TemporaryDirectory(prefix="dra-testbed-nvidia-") as tmp:
        overlay = Path(tmp)
        for source, target in ((binary, PLUGIN_IN_IMAGE), (hook, HOOK_IN_IMAGE)):
            path = overlay / target.lstrip("/")
            path.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(source, path)
            path.chmod(0o755)
        derive_image(base, overlay, reference, [f"ENV {PATH_ENV}", f'ENTRYPOINT ["{PLUGIN_IN_IMAGE}"]'])
    drop_stale(PLUGIN_REPO, reference)
    return reference
