"""The two images the Helm chart charts/dra-fake-gpus runs, built offline for clusters that pull nothing
(kind beds, air-gapped clusters):

- the KWOK controller: the kwok binary our toolchain builds from its Go module, with the Stages kwokctl runs
  its clusters with (node initialize, node heartbeat with lease, pod fast), taken from that module's
  kustomize/stage folder into a config file the entrypoint names: the kwok binary alone refuses to start
  ("no stages found");
- the publisher: the driver image plus the fake NVML library where `ensure_library` looks for it in the
  image's cache (provisioning a machine writes its driver root from it; without it the publisher tries to
  build the library, which needs Go and a C compiler the image has not).

Tags carry a hash of their inputs, so an unchanged image is never rebuilt.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hostenv.goenv import go_env
from testbed.clusters.kind.images.driver_image import CACHE_IN_IMAGE, ensure_driver_image
from testbed.clusters.kind.images.node_image import PATH_ENV, ImageBuildError, derive_image, drop_stale, ensure_base_image
from testbed.host import progress
from testbed.host.docker.dockerd import ensure_engine, image_present

KWOK_REPO = "dra-testbed/kwok"
PUBLISHER_REPO = "dra-testbed/fleet-publisher"
KWOK_IN_IMAGE = "/usr/local/bin/kwok"
KWOK_CONFIG_IN_IMAGE = "/etc/kwok/kwok.yaml"
# the Stages kwokctl gives a cluster whose nodes hold leases (the chart runs kwok with a lease duration)
KWOK_STAGES = ("node/fast/node-initialize.yaml", "node/heartbeat-with-lease/node-heartbeat-with-lease.yaml",
               "pod/fast/pod-ready.yaml", "pod/fast/pod-complete.yaml", "pod/fast/pod-delete.yaml")


@dataclass(frozen=True)
class FleetImages:
    """The chart's images as `repository:tag` references."""

    publisher: str
    kwok: str


def _digest(*parts: bytes) -> str:
    digest = hashlib.sha256()
    for part in parts:
        digest.update(part)
    return digest.hexdigest()[:12]


def kwok_stages(version: str) -> str:
    """The KWOK_STAGES of kwok `version` (`v0.8.0`) from its Go module, as one multi-document YAML."""
    folder = Path(go_env()["GOMODCACHE"]) / "sigs.k8s.io" / f"kwok@{version}" / "kustomize" / "stage"
    missing = [s for s in KWOK_STAGES if not (folder / s).is_file()]
    if missing:
        raise ImageBuildError(f"the kwok {version} Go module has no {missing[0]} under {folder}: build kwok from its module "
                              f"(`dra-testbed toolchain`) so the module is in the cache")
    return "".join(f"---\n{(folder / s).read_text().strip()}\n" for s in KWOK_STAGES)


def ensure_kwok_image(minor: str = "1.34") -> str:
    """Debian base + the kwok binary (statically linked Go) + its Stages; with no --kubeconfig kwok talks to
    the cluster through its pod's service account."""
    from testbed.toolchain.resolve import ensure

    ensure_engine()
    base = ensure_base_image()
    kwok = ensure(minor, ["kwok"]).path("kwok")
    version = kwok.parent.name  # the toolchain keeps each project's binaries in a folder named by version
    stages = kwok_stages(version)
    reference = f"{KWOK_REPO}:{version}-{_digest(base.encode(), stages.encode(), kwok.read_bytes())}"
    if image_present(reference):
        return reference
    with progress.step(f"building {reference}"), tempfile.TemporaryDirectory(prefix="dra-testbed-kwok-") as tmp:
        overlay = Path(tmp)
        binary = overlay / KWOK_IN_IMAGE.lstrip("/")
        binary.parent.mkdir(parents=True)
        shutil.copy2(kwok, binary)
        config = overlay / KWOK_CONFIG_IN_IMAGE.lstrip("/")
        config.parent.mkdir(parents=True)
        config.write_text(stages)
        derive_image(base, overlay, reference, [f"ENV {PATH_ENV}", f'ENTRYPOINT ["{KWOK_IN_IMAGE}", "--config={KWOK_CONFIG_IN_IMAGE}"]'])
    drop_stale(KWOK_REPO, reference)
    return reference


def ensure_publisher_image(minor: str = "1.34") -> str:
    """The driver image of `minor` + the fake NVML library in its cache under the build key the image's own
    fake_gpus computes (the same sources, so the same key): `ensure_library` finds it there."""
    from fake_gpus.nvml.build import ensure_library

    driver = ensure_driver_image(minor)
    library = ensure_library()
    reference = f"{PUBLISHER_REPO}:{_digest(driver.encode(), library.name.encode())}"
    if image_present(reference):
        return reference
    with progress.step(f"building {reference}"), tempfile.TemporaryDirectory(prefix="dra-testbed-fleet-publisher-") as tmp:
        overlay = Path(tmp)
        shutil.copytree(library, overlay / CACHE_IN_IMAGE.lstrip("/") / "nvml" / library.name, symlinks=True)
        derive_image(driver, overlay, reference, [])
    drop_stale(PUBLISHER_REPO, reference)
    return reference


def ensure_fleet_images(minor: str = "1.34") -> FleetImages:
    """Both of the chart's images, built when missing."""
    return FleetImages(publisher=ensure_publisher_image(minor), kwok=ensure_kwok_image(minor))
