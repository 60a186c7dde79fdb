"""Workload and driver images on the Debian base root, with Python packages installed from the host.

The host's Python and the image's are both CPython 3.11 on glibc 2.36 (bookworm), so `pip install
--target` on the host yields a tree the image's python3 can import; no container needs the network.
Tags carry a hash of their inputs, so an unchanged image is never rebuilt.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import sys
import tempfile
import tomllib
from importlib import metadata
from pathlib import Path

from hostenv.dirs import cache_root
from hostenv.processes import run_group
from testbed.host import progress
from testbed.host.docker.dockerd import ensure_engine, image_present
from testbed.clusters.kind.images.node_image import PATH_ENV, ImageBuildError, derive_image, drop_stale, ensure_base_image

SITE_IN_IMAGE = "/opt/dra-testbed/python"
NVML_IN_IMAGE = "/opt/dra-testbed/nvml"
CACHE_IN_IMAGE = "/opt/dra-testbed/cache"  # the plugin finds its generated stubs here
PROJECT_ROOT = Path(__file__).resolve().parents[4]
WORKLOAD_REPO = "dra-testbed/workload"
DRIVER_REPO = "dra-testbed/driver"
# the kubelet plugin's gRPC stack; pinned to the host's versions, which the suites were run with
DRIVER_EXTRAS = ("grpcio", "protobuf")
# what the driver image carries of ours: the driver and the plumbing below it, never the test bed
DRIVER_PACKAGES = ("fake_gpus", "hostenv")
# of our dependencies, those the driver imports (the rest is the harness's: plots, generated workloads,
# reports); every node loads the image, so each megabyte left out is loaded four times less per kind bed
DRIVER_DEPENDENCIES = ("kubernetes", "pyyaml", "filelock", "nvidia-ml-py", "grpcio", "grpcio-tools")


def _pip_install(target: Path, requirements: list[str], no_deps: bool = False) -> None:
    args = [sys.executable, "-m", "pip", "install", "--quiet", "--no-compile", "--target", str(target)]
    if no_deps:
        args.append("--no-deps")
    # a group of its own, stopped whole if we are interrupted; a temporary directory of its own, since a pip
    # stopped half-way leaves its unpacked wheels behind
    with tempfile.TemporaryDirectory(prefix="dra-testbed-pip-") as scratch:
        out = run_group([*args, *requirements], env={**os.environ, "TMPDIR": scratch})
    if out.returncode != 0:
        raise ImageBuildError(f"pip install {' '.join(requirements)} failed: {out.stderr.strip()[-300:]}")


def _pinned(name: str) -> str:
    try:
        return f"{name}=={metadata.version(name)}"
    except metadata.PackageNotFoundError:
        return name


def _tree_hash(*paths: Path, extra: str = "") -> str:
    digest = hashlib.sha256(extra.encode())
    for root in paths:
        files = [root] if root.is_file() else sorted(p for p in root.rglob("*") if p.is_file() and "__pycache__" not in p.parts)
        for file in files:
            digest.update(str(file.relative_to(root.parent)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()[:12]


def ensure_workload_image() -> str:
    """Debian base + nvidia-ml-py + nvml-report: prints what NVML shows as JSON (`--sleep` to stay up)."""
    ensure_engine()
    base = ensure_base_image()
    report = PROJECT_ROOT / "fake_gpus" / "nvml" / "report.py"
    reference = f"{WORKLOAD_REPO}:{_tree_hash(report, extra=base + _pinned('nvidia-ml-py'))}"
    if image_present(reference):
        return reference
    with progress.step(f"building {reference}"), tempfile.TemporaryDirectory(prefix="dra-testbed-workload-") as tmp:
        overlay = Path(tmp)
        _pip_install(overlay / SITE_IN_IMAGE.lstrip("/"), [_pinned("nvidia-ml-py")], no_deps=True)
        script = overlay / "usr/local/bin/nvml-report"
        script.parent.mkdir(parents=True)
        shutil.copy2(report, script)
        script.chmod(0o755)
        derive_image(base, overlay, reference, [f"ENV {PATH_ENV}", f"ENV PYTHONPATH={SITE_IN_IMAGE}",
                                                'ENTRYPOINT ["/usr/bin/python3", "/usr/local/bin/nvml-report"]'])
    drop_stale(WORKLOAD_REPO, reference)
    return reference


def project_dependencies() -> list[str]:
    """The `dependencies` of our pyproject.toml."""
    with (PROJECT_ROOT / "pyproject.toml").open("rb") as handle:
        return list(tomllib.load(handle)["project"]["dependencies"])


def requirement_name(requirement: str) -> str:
    """A requirement's distribution name, normalised (`PyYAML>=6` -> `pyyaml`)."""
    return re.split(r"[\s\[<>=!~;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def driver_dependencies() -> list[str]:
    """Our pyproject's requirements of the distributions the driver imports (DRIVER_DEPENDENCIES)."""
    found = [r for r in project_dependencies() if requirement_name(r) in DRIVER_DEPENDENCIES]
    missing = set(DRIVER_DEPENDENCIES) - {requirement_name(r) for r in found}
    if missing:
        raise ImageBuildError(f"pyproject.toml no longer requires {', '.join(sorted(missing))}, which the driver image installs")
    return found


def _python_deps(pins: str) -> Path:
    """The driver's dependencies (plus DRIVER_EXTRAS) installed for the image's Python, cached by inputs;
    our own packages are copied fresh on every build, so only a dependency change costs a pip run."""
    requirements = driver_dependencies()
    key = hashlib.sha256(((PROJECT_ROOT / "pyproject.toml").read_bytes() + pins.encode() + " ".join(requirements).encode())).hexdigest()[:12]
    target = cache_root() / "images" / "python-deps" / key
    if not target.is_dir():
        partial = target.with_suffix(".partial")
        shutil.rmtree(partial, ignore_errors=True)
        try:  # the dependencies only: installing the project itself would build it inside the work tree
            _pip_install(partial, [*requirements, *pins.split()])
        except BaseException:  # interrupted or failed: no half-written cache entry stays behind
            shutil.rmtree(partial, ignore_errors=True)
            raise
        partial.rename(target)
    return target


def driver_sources(root: Path = PROJECT_ROOT) -> list[Path]:
    """Our files the driver image is made of, and its tag hashes: the driver packages and pyproject.toml."""
    return [*(root / package for package in DRIVER_PACKAGES), root / "pyproject.toml"]


def driver_reference(base: str, generated: list[Path], root: Path = PROJECT_ROOT) -> str:
    """The driver image's tag: a hash of `driver_sources`, the `generated` library and stubs, the base and pins."""
    pins = " ".join(_pinned(name) for name in DRIVER_EXTRAS)
    return f"{DRIVER_REPO}:{_tree_hash(*driver_sources(root), *generated, extra=base + pins + ' '.join(DRIVER_DEPENDENCIES))}"


def ensure_driver_image(minor: str = "1.34") -> str:
    """Debian base + our packages and their dependencies + the fake libnvidia-ml.so.1 + kubelet API stubs
    of `minor` (generated on the host: the image has no Go to fetch the .proto files with)."""
    from fake_gpus.driver.kubeletplugin.protos import ensure_protos, version_for
    from fake_gpus.nvml.build import ensure_library

    ensure_engine()
    base = ensure_base_image()
    library = ensure_library()
    protos = ensure_protos(version_for(minor))
    pins = " ".join(_pinned(name) for name in DRIVER_EXTRAS)
    reference = driver_reference(base, [library, protos])
    if image_present(reference):
        return reference
    with progress.step(f"building {reference}") as step, tempfile.TemporaryDirectory(prefix="dra-testbed-driver-") as tmp:
        overlay = Path(tmp)
        site = overlay / SITE_IN_IMAGE.lstrip("/")
        step.update("Python dependencies")
        shutil.copytree(_python_deps(pins), site, symlinks=True)
        step.update("our packages")
        for package in DRIVER_PACKAGES:
            shutil.rmtree(site / package, ignore_errors=True)
            shutil.copytree(PROJECT_ROOT / package, site / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
        step.update("adding the fake NVML library")
        nvml = overlay / NVML_IN_IMAGE.lstrip("/")
        shutil.copytree(library, nvml, symlinks=True)
        shutil.copytree(protos.parent, overlay / CACHE_IN_IMAGE.lstrip("/") / "protos" / protos.parent.name)
        derive_image(base, overlay, reference, [
            f"ENV {PATH_ENV}", f"ENV PYTHONPATH={SITE_IN_IMAGE}", f"ENV LD_LIBRARY_PATH={NVML_IN_IMAGE}",
            f"ENV DRA_TESTBED_CACHE={CACHE_IN_IMAGE}",
            'ENTRYPOINT ["/usr/bin/python3", "-m", "fake_gpus.driver.kubeletplugin"]'])
    drop_stale(DRIVER_REPO, reference)
    return reference
