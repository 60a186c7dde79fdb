"""The container images Kubernetes' DRA e2e tests run, built offline under the references e2e.test asks for.

e2e.test names its images at compile time: test/utils/image/manifest.go (busybox, pause) and the DRA
manifests (the test-driver proxy pod, the sample device plugin). Those references are read from the
k8s.io/kubernetes module of the release, and each image is built here from a Debian package and Go code,
never pulled: busybox from Debian's busybox-static (installed on the host); the proxy pod's `/hostpathplugin` is our own program
(testbed/upstream/proxy: sig-storage's module is not served by the Go proxy) on that busybox; pause is
the node image's C pause; sample-device-plugin is the module's own main package on busybox. The tests use
these tags with the default pull policy, so a copy in each node's containerd is what runs.
"""

from __future__ import annotations

import hashlib
import io
import re
import subprocess
import tarfile
import tempfile
from dataclasses import dataclass
from pathlib import Path

from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from hostenv.versions import Release, release_for
from testbed.host import hostdeps, progress
from testbed.host.docker.dockerd import docker, ensure_engine
from testbed.clusters.kind.images.node_image import PATH_ENV, ImageBuildError
from testbed.toolchain import gobuild

PROXY_SOURCE = Path(__file__).resolve().parent / "proxy"
SAMPLE_DEVICE_PLUGIN = "k8s.io/kubernetes/test/images/sample-device-plugin"
LABEL = "io.dra-testbed.inputs"  # hash of what an image was built from: a changed input rebuilds it
# the manifests the DRA tests deploy, and the container whose image each holds
MANIFESTS = {
    "proxy": "test/e2e/testing-manifests/dra/dra-test-driver-proxy.yaml",
    "sample-device-plugin": "test/e2e/testing-manifests/sample-device-plugin/sample-device-plugin.yaml",
}
# from 1.36 the proxy manifest holds a placeholder: deploy.go patches in the newest hostpathplugin of the
# storage-csi manifests (test/utils/image registers their images), by plain string comparison of tags
PLACEHOLDER_TAG = "to-be-replaced"
CSI_MANIFESTS = "test/e2e/testing-manifests/storage-csi"
# test/utils/image names: ImageID -> role here
MANIFEST_IDS = {"BusyBox": "busybox", "Pause": "pause"}


@dataclass(frozen=True)
class ImageRefs:
    """The image references compiled into one release's e2e.test, per role."""

    proxy: str
    busybox: str
    pause: str
    sample_device_plugin: str

    def all(self) -> list[str]:
        return [self.proxy, self.busybox, self.pause, self.sample_device_plugin]


def module_dir(release: Release) -> Path:
    """The k8s.io/kubernetes module source of `release` in the Go module cache (there once e2e.test is built)."""
    path = cache_root() / "go" / "mod" / "k8s.io" / f"kubernetes@{release.kubernetes}"
    if not path.is_dir():
        raise ImageBuildError(f"{path} is missing: build e2e.test first (`dra-testbed upstream-e2e --build-only --k8s {release.minor}`)")
    return path


def manifest_references(manifest_go: str) -> dict[str, str]:
    """role -> reference from test/utils/image/manifest.go (default registries; KUBE_TEST_REPO* unset)."""
    registries = dict(re.findall(r'^\s*(\w+Registry):\s*"([^"]+)"', manifest_go, re.M))
    found = {}
    for image_id, role in MANIFEST_IDS.items():
        match = re.search(rf"configs\[{image_id}\]\s*=\s*Config\{{list\.(\w+),\s*\"([^\"]+)\",\s*\"([^\"]+)\"\}}", manifest_go)
        if not match or match.group(1) not in registries:
            raise ImageBuildError(f"test/utils/image/manifest.go: no default image for {image_id}")
        found[role] = f"{registries[match.group(1)]}/{match.group(2)}:{match.group(3)}"
    return found


def _yaml_images(text: str) -> set[str]:
    return set(re.findall(r"^\s*-?\s*image:\s*(\S+)", text, re.M))


def yaml_image(text: str, where: str) -> str:
    """The one `image:` of a manifest."""
    images = sorted(_yaml_images(text))
    if len(images) != 1:
        raise ImageBuildError(f"{where}: expected one image, found {images or 'none'}")
    return images[0]


def references(module: Path) -> ImageRefs:
    """The images e2e.test of the module at `module` runs for the DRA tests."""
    found = manifest_references((module / "test/utils/image/manifest.go").read_text())
    for role, rel in MANIFESTS.items():
        found[role] = yaml_image((module / rel).read_text(), rel)
    repo, _, tag = found["proxy"].rpartition(":")
    if tag == PLACEHOLDER_TAG:
        found["proxy"] = newest_csi_image(module / CSI_MANIFESTS, repo)
    return ImageRefs(found["proxy"], found["busybox"], found["pause"], found["sample-device-plugin"])


def newest_csi_image(folder: Path, repo: str) -> str:
    """`repo:TAG` with the greatest TAG (string order, as deploy.go compares) among the storage-csi manifests."""
    tags = [ref.rpartition(":")[2] for path in sorted(folder.rglob("*.yaml")) for ref in _yaml_images(path.read_text())
            if ref.rpartition(":")[0] == repo]
    if not tags:
        raise ImageBuildError(f"{folder}: no {repo} image to patch into the DRA proxy manifest")
    return f"{repo}:{max(tags)}"


# -- inputs --------------------------------------------------------------------------------------------
def busybox_binary() -> Path:
    """Debian's static busybox (package busybox-static, installed on the host through hostdeps when missing)."""
    try:
        hostdeps.ensure("busybox")
    except hostdeps.HostDepsMissing as exc:
        raise ImageBuildError(str(exc)) from exc
    return Path("/bin/busybox").resolve()


def busybox_applets(binary: Path) -> list[str]:
    """The applets the binary offers (sh, env, base64, mkdir, rm, mv, sleep, ...)."""
    out = subprocess.run([str(binary), "--list"], capture_output=True, text=True, check=True)
    return sorted(set(out.stdout.split()) - {"busybox"})


def _bin_dir() -> Path:
    path = cache_root() / "images" / "upstream-bin"
    path.mkdir(parents=True, exist_ok=True)
    return path


def proxy_binary() -> Path:
    """Our `/hostpathplugin` (proxy mode only), built static with the machine's Go."""
    digest = _digest(*sorted(PROXY_SOURCE.iterdir()))
    binary = _bin_dir() / f"hostpathplugin-{digest}"
    if not binary.is_file():
        log = binary.with_name(binary.name + ".log")
        log.write_text("")
        with progress.step("building the DRA test-driver proxy (hostpathplugin)"):
            gobuild.run_go([go_binary(), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary), "."],
                           PROXY_SOURCE, log, None, go_env(CGO_ENABLED="0"))
    return binary


def sample_device_plugin_binary(release: Release) -> Path:
    """test/images/sample-device-plugin of the release, built from the module (static)."""
    binary = _bin_dir() / f"sampledeviceplugin-{release.kubernetes}"
    if not binary.is_file():
        log = binary.with_name(binary.name + ".log")
        log.write_text("")
        partial = binary.with_name(binary.name + ".partial")
        with progress.step(f"building sample-device-plugin {release.kubernetes} (log: {log})") as step:
            work, _ = gobuild.kubernetes_wrapper(f"sample-device-plugin-{release.kubernetes}", release.kubernetes,
                                                 release.staging, [SAMPLE_DEVICE_PLUGIN], log)
            env = go_env(CGO_ENABLED="0")
            gobuild.run_go([go_binary(), "mod", "tidy"], work, log, step.update, env)
            gobuild.run_go(["nice", "-n", "10", go_binary(), "build", "-v", "-trimpath", "-ldflags", "-s -w", "-o", str(partial),
                            SAMPLE_DEVICE_PLUGIN], work, log, step.update, env)
        partial.rename(binary)
    return binary


def pause_binary(work: Path) -> Path:
    """The node image's pause (C, static): the sandbox image the e2e framework names."""
    from testbed.clusters.kind.images.node_image import _pause_binary

    return _pause_binary(work)


# -- images --------------------------------------------------------------------------------------------
def _digest(*files: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for file in files:
        digest.update(file.name.encode())
        digest.update(file.read_bytes())
    return digest.hexdigest()[:16]


def _inputs_of(reference: str) -> str:
    out = docker("image", "inspect", "--format", f'{{{{index .Config.Labels "{LABEL}"}}}}', reference, check=False)
    return out.stdout.strip() if out.returncode == 0 else ""


def import_image(reference: str, files: dict[str, Path], links: dict[str, str], changes: list[str], inputs: str) -> None:
    """`docker import` one layer of `files` (path -> file, mode kept) and `links` (path -> symlink target)
    as `reference`, labelled with `inputs`; /tmp is there (sticky) for shells' here-documents."""
    buffer = tempfile.TemporaryFile()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for folder in ("tmp",):
            info = tarfile.TarInfo(folder)
            info.type, info.mode = tarfile.DIRTYPE, 0o1777
            tar.addfile(info)
        for path, source in sorted(files.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            data = source.read_bytes()
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        for path, target in sorted(links.items()):
            info = tarfile.TarInfo(path.lstrip("/"))
            info.type, info.linkname, info.mode = tarfile.SYMTYPE, target, 0o777
            tar.addfile(info)
    buffer.seek(0)
    args = ["docker", "import", *[x for c in [*changes, f"LABEL {LABEL}={inputs}"] for x in ("--change", c)], "-", reference]
    out = subprocess.run(args, stdin=buffer, capture_output=True, text=True)
    if out.returncode != 0:
        raise ImageBuildError(f"docker import of {reference} failed: {out.stderr.strip()}")


def _busybox_tree(binary: Path) -> tuple[dict[str, Path], dict[str, str]]:
    links = {f"/bin/{applet}": "busybox" for applet in busybox_applets(binary)}
    return {"/bin/busybox": binary}, links


def ensure_images(minor: str) -> ImageRefs:
    """Build (when missing or stale) every image the release's DRA e2e tests run; returns their references."""
    release = release_for(minor)
    refs = references(module_dir(release))
    ensure_engine()
    busybox = busybox_binary()
    files, links = _busybox_tree(busybox)
    shell = [f"ENV {PATH_ENV}"]
    with tempfile.TemporaryDirectory(prefix="dra-testbed-upstream-images-") as tmp:
        wanted = {
            refs.busybox: (lambda: (files, shell)),
            refs.proxy: (lambda: ({**files, "/hostpathplugin": proxy_binary()}, shell)),
            refs.pause: (lambda: ({"/pause": pause_binary(Path(tmp))}, ['ENTRYPOINT ["/pause"]'])),
            refs.sample_device_plugin: (lambda: ({**files, "/sampledeviceplugin": sample_device_plugin_binary(release)},
                                                 [*shell, 'ENTRYPOINT ["/sampledeviceplugin", "-alsologtostderr"]'])),
        }
        for reference, build in wanted.items():
            content, changes = build()
            image_links = links if "/bin/busybox" in content else {}
            inputs = _digest(*content.values(), extra=" ".join(changes) + " ".join(sorted(image_links)))
            if _inputs_of(reference) != inputs:
                with progress.step(f"building {reference}"):
                    import_image(reference, content, image_links, changes, inputs)
    return refs
