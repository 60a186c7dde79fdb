"""Offline kind node image: a Debian root, runtime and Kubernetes binaries, control-plane images preloaded.

No registry is contacted. Control-plane images are FROM-scratch images of the toolchain's static
binaries (kube-proxy sits on the Debian base root, for iptables), imported into the node's containerd
under the names kubeadm asks for. The result is tagged `dra-testbed/node:<k8s version>-<hash>`; a
`kindest/node:<k8s version>` already present locally is used instead (online users).
"""

from __future__ import annotations

import hashlib
import io
import json
import shutil
import subprocess
import tarfile
import tempfile
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

from hostenv.versions import Release, release_for
from testbed.host import hostdeps, progress
from testbed.clusters.kind.images import node_components, node_files, rootfs
from testbed.clusters.kind.images import node_storage
from testbed.errors import EnvironmentProblem
from testbed.host.docker.dockerd import DockerError, docker, ensure_engine, image_present
from testbed.toolchain.resolve import ensure

TOOLCHAIN_BINARIES = ("kube-apiserver", "kube-controller-manager", "kube-scheduler", "kubelet", "kubectl", "etcd")
REGISTRY = "registry.k8s.io"
PATH_ENV = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
NODE_REPO = "dra-testbed/node"
BASE_REPO = "dra-testbed/debian-base"
IMAGE_FORMAT = "1"  # bump when the node layout changes in a way the inputs' hash cannot see


class ImageBuildError(EnvironmentProblem):
    """A node, driver or workload image could not be built; one line for the user."""


@dataclass(frozen=True)
class NodeImage:
    """A node image ready for `kind create cluster --image`."""

    reference: str
    origin: str  # "kindest" | "cache" | "build"


def kindest_reference(release: Release) -> str:
    return f"kindest/node:{release.kubernetes}"


def _stage_inputs_hash(release: Release) -> str:
    text = json.dumps({
        "format": IMAGE_FORMAT, "release": release.kubernetes, "etcd": release.etcd,
        "node": rootfs.rootfs_tarball("node").name, "base": rootfs.rootfs_tarball("base").name,
        "components": node_components._stamp(release),
        "files": hashlib.sha256(Path(node_files.__file__).read_bytes()).hexdigest(),
        "storage": [node_storage.MARKER_IN_NODE, node_storage.SNAPSHOTS_IN_NODE],  # the entrypoint's paths
        "builder": hashlib.sha256(Path(__file__).read_bytes()).hexdigest(),
    }, sort_keys=True)
    return hashlib.sha256(text.encode()).hexdigest()[:12]


def node_reference(release: Release) -> str:
    """Tag of our offline node image for `release` with the current inputs."""
    return f"{NODE_REPO}:{release.kubernetes}-{_stage_inputs_hash(release)}"


def import_tree(files: dict[str, tuple[bytes | Path, int]], reference: str, changes: list[str]) -> None:
    """`docker import` a one-layer image holding `files` (path -> bytes or a file, and mode)."""
    buffer = tempfile.TemporaryFile()
    with tarfile.open(fileobj=buffer, mode="w") as tar:
        for path, (content, mode) in sorted(files.items()):
            data = content.read_bytes() if isinstance(content, Path) else content
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    buffer.seek(0)
    args = ["docker", "import", *[x for c in changes for x in ("--change", c)], "-", reference]
    out = subprocess.run(args, stdin=buffer, capture_output=True, text=True)
    if out.returncode != 0:
        raise ImageBuildError(f"docker import of {reference} failed: {out.stderr.strip()}")


def ensure_base_image() -> str:
    """The Debian base root (Python, iptables) as an image: the lower layer of derived images."""
    tarball = rootfs.ensure_rootfs("base")
    reference = f"{BASE_REPO}:{tarball.stem.rsplit('-', 1)[-1]}"
    if not image_present(reference):
        with progress.step(f"importing {reference}"):
            docker("import", "--change", f"ENV {PATH_ENV}", str(tarball), reference)
    return reference


def derive_image(base: str, overlay: Path, reference: str, changes: list[str]) -> None:
    """Image `reference`: `base` plus the tree at `overlay` as one more layer, with `changes` applied."""
    cid = f"dra-testbed-derive-{uuid.uuid4().hex[:10]}"  # named: removable even if `create` itself is interrupted
    try:
        docker("create", "--pull", "never", "--name", cid, base, "/bin/true")
        docker("cp", f"{overlay}/.", f"{cid}:/")
        docker("commit", *[x for c in changes for x in ("--change", c)], cid, reference)
    finally:
        docker("rm", "-f", cid, check=False)


def _kubeadm_images(kubeadm: Path, release: Release) -> dict[str, str]:
    """Image name kubeadm expects, per component (kube-apiserver, etcd, coredns, pause, ...)."""
    out = subprocess.run([str(kubeadm), "config", "images", "list", "--kubernetes-version", release.kubernetes],
                         capture_output=True, text=True, check=True)
    names = [line.strip() for line in out.stdout.splitlines() if line.strip()]
    return {name.rsplit("/", 1)[-1].split(":")[0]: name for name in names}


def _pause_binary(work: Path) -> Path:
    source = work / "pause.c"
    source.write_text(node_files.PAUSE_C)
    binary = work / "pause"
    out = subprocess.run(["gcc", "-Os", "-static", "-s", "-o", str(binary), str(source)], capture_output=True, text=True)
    if out.returncode != 0:
        raise ImageBuildError(f"compiling pause failed (gcc and libc6-dev needed): {out.stderr.strip()[-200:]}")
    return binary


def build_control_plane_images(release: Release, bins: Path, toolchain: dict[str, Path], work: Path) -> list[str]:
    """Tag every image kubeadm asks for (and our etcd under its own version); returns the references."""
    wanted = _kubeadm_images(bins / "kubeadm", release)
    refs: list[str] = []
    for name in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
        import_tree({f"/usr/local/bin/{name}": (toolchain[name], 0o755)}, wanted[name], [f"ENV {PATH_ENV}"])
        refs.append(wanted[name])
    etcd_tag = f"{REGISTRY}/etcd:{release.etcd.removeprefix('v')}-0"
    import_tree({"/usr/local/bin/etcd": (toolchain["etcd"], 0o755)}, etcd_tag, [f"ENV {PATH_ENV}"])
    # kubeadm pins an etcd patch of its own; ours is the toolchain's etcd of the same minor
    docker("tag", etcd_tag, wanted["etcd"])
    refs += sorted({etcd_tag, wanted["etcd"]})
    import_tree({"/coredns": (bins / "coredns", 0o755)}, wanted["coredns"], ['ENTRYPOINT ["/coredns"]'])
    import_tree({"/pause": (_pause_binary(work), 0o755)}, wanted["pause"], ['ENTRYPOINT ["/pause"]'])
    refs += [wanted["coredns"], wanted["pause"]]
    overlay = work / "kube-proxy"
    (overlay / "usr/local/bin").mkdir(parents=True)
    shutil.copy2(bins / "kube-proxy", overlay / "usr/local/bin/kube-proxy")
    derive_image(ensure_base_image(), overlay, wanted["kube-proxy"], [f"ENV {PATH_ENV}"])
    refs.append(wanted["kube-proxy"])
    return refs


def _node_overlay(release: Release, bins: Path, toolchain: dict[str, Path], pause_image: str, work: Path) -> Path:
    overlay = work / "node"
    placements = {
        "usr/bin": [toolchain["kubelet"], toolchain["kubectl"], bins / "kubeadm"],
        "usr/local/bin": [bins / n for n in ("containerd", "containerd-shim-runc-v2", "ctr", "crictl")],
        "usr/local/sbin": [bins / "runc"],
        "opt/cni/bin": [bins / n for n in node_components.CNI_PLUGINS.packages],
    }
    for folder, files in placements.items():
        (overlay / folder).mkdir(parents=True, exist_ok=True)
        for file in files:
            shutil.copy2(file, overlay / folder / file.name)
    for path, (content, mode) in node_files.static_files(pause_image, release.kubernetes).items():
        target = overlay / path.lstrip("/")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(content)
        target.chmod(mode)
    # /var/run is a symlink to /run (a tmpfs in kind nodes): CDI specs there are made at run time
    for folder in ("etc/kubernetes/manifests", "etc/cni/net.d", "var/lib/kubelet", "etc/cdi"):
        (overlay / folder).mkdir(parents=True, exist_ok=True)
    return overlay


NODE_SETUP = """set -e
ctr oci spec | jq 'del(.process.rlimits)' > /etc/containerd/cri-base.json
containerd config dump > /dev/null
systemctl enable containerd.service kubelet.service
systemctl mask {masked}
echo 'ReadKMsg=no' >> /etc/systemd/journald.conf
rm -f /etc/machine-id && touch /etc/machine-id
"""



def containerd_script(*steps: str) -> str:
    """A build container's script: start its containerd, run `steps` (ctr commands) against it, stop it."""
    return "\n".join([
        "set -e",
        "(containerd > /var/log/containerd-build.log 2>&1 &)",
        "for i in $(seq 1 60); do ctr version >/dev/null 2>&1 && break; sleep 0.5; done",
        *steps,
        "kill $(pidof containerd); while pidof containerd >/dev/null; do sleep 0.2; done",
        "rm -f /var/log/containerd-build.log",
    ]) + "\n"


# the images of /kind/images.tar into containerd: content only, pinned, unpacked by the pods that first run them
IMPORT_IMAGES = ("ctr --namespace=k8s.io images import --local --no-unpack --label=io.cri-containerd.pinned=pinned /kind/images.tar\n"
                 "ctr --namespace=k8s.io images list -q\n"
                 "rm -f /kind/images.tar")
IMPORT_SCRIPT = containerd_script(IMPORT_IMAGES)


def build_node_image(release: Release, reference: str) -> None:
    """Assemble our node image for `release` and tag it `reference` (no registry contacted)."""
    toolchain = {name: b.path for name, b in ensure(release.minor, TOOLCHAIN_BINARIES).binaries.items()}
    bins = node_components.ensure_components(release)
    node_root = rootfs.ensure_rootfs("node")
    with tempfile.TemporaryDirectory(prefix="dra-testbed-node-") as tmp:
        work = Path(tmp)
        with progress.step("building control-plane images (FROM scratch, kube-proxy on Debian)"):
            refs = build_control_plane_images(release, bins, toolchain, work)
        pause_image = _kubeadm_images(bins / "kubeadm", release)["pause"]
        overlay = _node_overlay(release, bins, toolchain, pause_image, work)
        with progress.step(f"saving {len(refs)} images for the node's containerd"):
            docker("save", "-o", str(overlay / "kind" / "images.tar"), *refs)
        root_ref = f"{NODE_REPO}-root:{node_root.stem.rsplit('-', 1)[-1]}"
        if not image_present(root_ref):
            with progress.step(f"importing the node root as {root_ref}"):
                docker("import", str(node_root), root_ref)
        name = f"dra-testbed-build-{int(time.time())}"
        with progress.step(f"assembling {reference}") as step:
            try:  # an interruption during `docker run` itself may leave the container: the finally removes it too
                docker("run", "--pull", "never", "-d", "--privileged", "--name", name, "--entrypoint", "sleep", root_ref, "infinity")
                step.update("copying binaries and settings")
                docker("cp", f"{overlay}/.", f"{name}:/")
                step.update("configuring systemd and containerd")
                docker("exec", name, "bash", "-c", NODE_SETUP.format(masked=" ".join(node_files.MASKED_UNITS)))
                step.update("importing images into containerd")
                docker("exec", name, "bash", "-c", IMPORT_SCRIPT)
                docker("commit",
                       "--change", 'ENTRYPOINT ["/usr/local/bin/entrypoint", "/sbin/init"]',
                       "--change", "ENV container=docker",
                       "--change", f"ENV {PATH_ENV}",
                       name, reference)
            finally:
                docker("rm", "-f", "-v", name, check=False)


STALE_AFTER = 6 * 3600  # seconds; younger builds may belong to another work tree sharing this dockerd


def drop_stale(repo: str, keep: str, prefix: str = "") -> None:
    """Remove older builds of `repo` whose tag starts with `prefix` (tags are input hashes: an old one
    is never asked for again by this tree). Builds younger than STALE_AFTER stay: another work tree on
    the same dockerd may have just built one and be about to load it into its nodes."""
    import datetime

    listing = docker("images", repo, "--format", "{{.Repository}}:{{.Tag}}\t{{.CreatedAt}}", check=False).stdout.splitlines()
    now = datetime.datetime.now(datetime.timezone.utc)
    stale = []
    for line in listing:
        tag, _, created = line.partition("\t")
        try:
            age = (now - datetime.datetime.strptime(" ".join(created.split()[:3]), "%Y-%m-%d %H:%M:%S %z")).total_seconds()
        except ValueError:
            continue  # an unreadable date: keep it
        if tag != keep and ":" in tag and tag.split(":", 1)[1].startswith(prefix) and age > STALE_AFTER:
            stale.append(tag)
    if stale:
        docker("rmi", *stale, check=False)


def ensure_node_image(minor: str, *, prefer_kindest: bool = True, rebuild: bool = False) -> NodeImage:
    """A node image for `minor`: kindest/node when present locally, else our cached build, else a build."""
    release = release_for(minor)
    ensure_engine()
    if prefer_kindest and not rebuild and image_present(kindest_reference(release)):
        return NodeImage(kindest_reference(release), "kindest")
    reference = node_reference(release)
    if not rebuild and image_present(reference):
        return NodeImage(reference, "cache")
    try:
        with progress.step(f"building node image {reference}"):
            build_node_image(release, reference)
    except (DockerError, rootfs.RootfsError, hostdeps.HostDepsMissing, subprocess.CalledProcessError) as exc:
        raise ImageBuildError(f"node image build failed: {exc}") from exc
    drop_stale(NODE_REPO, reference, prefix=f"{release.kubernetes}-")
    return NodeImage(reference, "build")
