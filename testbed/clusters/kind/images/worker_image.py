"""The GPU workers' node image: the node image with the driver's image already in its containerd.

Loading the driver image into each worker at `up` (`kind load docker-image`: docker save, then an import
and unpack in every node) took 11-24 s beside kubeadm on 2 cores, and slowed kubeadm too. Baked into the
image the workers boot from, it costs that once per driver build and node image: the image's content is
imported as kind's node images carry their own control-plane images (content only, pinned, unpacked
when the driver's pod first starts or early, node_storage.py), and docker copies it into each worker's
/var. The control plane's own images are left out of it.
"""

from __future__ import annotations

import hashlib
import tempfile
import uuid
from pathlib import Path

from testbed.host import progress
from testbed.host.docker.dockerd import docker, image_present
from testbed.clusters.kind.images.node_image import IMPORT_IMAGES, containerd_script, drop_stale

WORKER_REPO = "dra-testbed/worker"
# A worker never runs the control plane's images; docker copies the image's /var into each node's volume
# when kind makes it, so they cost a worker its start (~300 MB, ~1 s here) and nothing else.
DROP_CONTROL_PLANE_IMAGES = ("ctr --namespace=k8s.io images ls -q | grep -E '/(etcd|kube-apiserver|kube-controller-manager|kube-scheduler):' \\\n"
                             "  | xargs -r ctr --namespace=k8s.io images rm --sync\n"
                             "ctr --namespace=k8s.io images ls -q")
BUILD_SCRIPT = containerd_script(IMPORT_IMAGES, DROP_CONTROL_PLANE_IMAGES)


def _image_id(reference: str) -> str:
    return docker("image", "inspect", "--format", "{{.Id}}", reference).stdout.strip()


def _entrypoint(reference: str) -> str:
    return docker("image", "inspect", "--format", "{{json .Config.Entrypoint}}", reference).stdout.strip()


def worker_reference(node_image: str, images: list[str]) -> str:
    """Tag of `node_image` with `images` inside: the node image's tag and a hash of what it was made from."""
    digest = hashlib.sha256("\n".join([_image_id(node_image), BUILD_SCRIPT, *sorted(_image_id(i) for i in images)]).encode())
    return f"{WORKER_REPO}:{node_image.rsplit(':', 1)[-1]}-{digest.hexdigest()[:12]}"


def ensure_worker_image(node_image: str, images: list[str]) -> str:
    """The worker image of `node_image` holding `images`, built when missing; older builds are dropped."""
    reference = worker_reference(node_image, images)
    if image_present(reference):
        return reference
    name = f"dra-testbed-worker-build-{uuid.uuid4().hex[:10]}"  # named: removable even if `run` is interrupted
    with progress.step(f"building the workers' image {reference} ({', '.join(images)} inside)") as step, \
            tempfile.TemporaryDirectory(prefix="dra-testbed-worker-") as tmp:
        archive = Path(tmp) / "images.tar"
        try:
            step.update("saving the images")
            docker("save", "-o", str(archive), *images)
            docker("run", "--pull", "never", "-d", "--privileged", "--name", name, "--entrypoint", "sleep", node_image, "infinity")
            step.update("copying them into a node")
            docker("cp", str(archive), f"{name}:/kind/images.tar")
            step.update("importing them into its containerd")
            docker("exec", name, "bash", "-c", BUILD_SCRIPT)
            step.update("committing")
            # the node image's ENTRYPOINT (the run above replaced it; setting it clears the run's CMD too)
            docker("commit", "--change", f"ENTRYPOINT {_entrypoint(node_image)}", name, reference)
        finally:
            docker("rm", "-f", "-v", name, check=False)
    drop_stale(WORKER_REPO, reference, prefix=node_image.rsplit(":", 1)[-1].split("-")[0])
    return reference
