"""Python gRPC stubs of the kubelet's plugin APIs, generated at build time from the `k8s.io/kubelet` Go module.

Nothing generated lives in the repository: the module of the matching Kubernetes version is fetched
with `go mod download`, its .proto files are copied into the cache (with the gogoproto import and
options removed: they only steer Go code generation and have no effect on the wire), compiled with
grpc_tools.protoc into `cache_root()/protos/<version>/`, and imported from there. The copies sit under
a package named after the version (`kubelet_v0_34_4`), so two versions never clash in one process.

`python -m fake_gpus.driver.kubeletplugin.protos [--k8s 1.34]` generates ahead of time (e.g. in an
image build, with $DRA_TESTBED_CACHE pointing at a directory the image keeps).
"""

from __future__ import annotations

import argparse
import functools
import importlib
import importlib.metadata
import json
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Callable

from filelock import FileLock

from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from hostenv.versions import DEFAULT_MINOR, release_for

KUBELET_MODULE = "k8s.io/kubelet"
# name in the generated package -> path inside the k8s.io/kubelet module
PROTO_FILES = {
    "dra_v1": "pkg/apis/dra/v1/api.proto",
    "dra_v1beta1": "pkg/apis/dra/v1beta1/api.proto",
    "health_v1alpha1": "pkg/apis/dra-health/v1alpha1/api.proto",
    "registration_v1": "pkg/apis/pluginregistration/v1/api.proto",
}
_STAMP = "complete.json"  # written last: a directory without it is a half-finished generation


class ProtoBuildError(RuntimeError):
    """The stubs could not be generated; the message names the failing step."""


@dataclass(frozen=True)
class KubeletProtos:
    """Message (`*_pb2`) and service (`*_pb2_grpc`) modules of each API."""

    version: str
    dra_v1: ModuleType
    dra_v1_grpc: ModuleType
    dra_v1beta1: ModuleType
    dra_v1beta1_grpc: ModuleType
    health: ModuleType
    health_grpc: ModuleType
    registration: ModuleType
    registration_grpc: ModuleType


def kubelet_module_dir(version: str) -> Path:
    """Download (or find in the module cache) k8s.io/kubelet@version and return its directory."""
    return go_module_dir(KUBELET_MODULE, version)


def go_module_dir(module: str, version: str) -> Path:
    """Download (or find in the module cache) module@version and return its directory."""
    cmd = [go_binary(), "mod", "download", "-json", f"{module}@{version}"]
    with tempfile.TemporaryDirectory() as empty:  # outside any module: go.mod files nearby must not matter
        proc = subprocess.run(cmd, env=go_env(), cwd=empty, capture_output=True, text=True)
    if proc.returncode != 0:
        raise ProtoBuildError(f"`{' '.join(cmd)}` failed: {proc.stderr.strip() or proc.stdout.strip()}")
    return Path(json.loads(proc.stdout)["Dir"])


_GOGO_IMPORT = re.compile(r'^\s*import\s+"github\.com/gogo/protobuf/gogoproto/gogo\.proto";\s*$', re.M)
_GOGO_FILE_OPTION = re.compile(r"^\s*option\s+\(gogoproto\.[a-z_]+\)\s*=\s*[^;]+;\s*$", re.M)
_GOGO_FIELD_OPTION = re.compile(r"\s*\[\s*\(gogoproto\.[a-z_]+\)\s*=\s*[^\]]+\]")


def strip_gogo(text: str) -> str:
    """A .proto without gogoproto's import and options (Go-only code-generation hints)."""
    text = _GOGO_IMPORT.sub("", text)
    text = _GOGO_FILE_OPTION.sub("", text)
    text = _GOGO_FIELD_OPTION.sub("", text)
    if "gogoproto" in text:
        raise ProtoBuildError("a gogoproto option survived stripping; the .proto uses a form this generator does not know")
    return text


def package_name(version: str) -> str:
    """The Python package the stubs of `version` live in: v0.34.4 -> kubelet_v0_34_4."""
    return "kubelet_" + re.sub(r"[^0-9a-zA-Z]", "_", version)


def protos_dir(version: str) -> Path:
    return cache_root() / "protos" / version


def proto_include() -> Path:
    """google/protobuf/*.proto as shipped with grpcio-tools (imported here: only generation needs it)."""
    from grpc_tools import protoc

    return Path(protoc.__file__).resolve().parent / "_proto"


def _generate(version: str, out: Path) -> dict:
    """Copy, strip and compile the protos of `version` into `out` (a fresh directory); what the stamp records."""
    from grpc_tools import protoc

    module = kubelet_module_dir(version)
    pkg = package_name(version)
    src = out / "src"
    for name, rel in PROTO_FILES.items():
        proto = module / rel
        if not proto.is_file():
            raise ProtoBuildError(f"{rel} missing from {KUBELET_MODULE}@{version} ({module})")
        dest = src / pkg / f"{name}.proto"
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(strip_gogo(proto.read_text()))
    py = out / "py"
    py.mkdir(parents=True)
    args = ["grpc_tools.protoc", f"-I{src}", f"-I{proto_include()}", f"--python_out={py}", f"--grpc_python_out={py}",
            *(f"{pkg}/{name}.proto" for name in PROTO_FILES)]
    if protoc.main(args) != 0:
        raise ProtoBuildError(f"grpc_tools.protoc failed on the protos of {KUBELET_MODULE}@{version}")
    (py / pkg / "__init__.py").write_text("")
    return {"module": KUBELET_MODULE, "version": version, "files": PROTO_FILES}


def _tools_version() -> str | None:
    """grpcio-tools' version (the generated code requires a grpcio at least as new), None if not installed."""
    try:
        return importlib.metadata.version("grpcio-tools")
    except importlib.metadata.PackageNotFoundError:
        return None


def _fresh(final: Path) -> bool:
    """Generated completely, by the installed grpcio-tools (or by any, where none is installed: runtime images)."""
    try:
        stamp = json.loads((final / _STAMP).read_text())
    except (OSError, ValueError):
        return False
    tools = _tools_version()
    return tools is None or stamp.get("grpcio_tools") == tools


def build_once(final: Path, generate: Callable[[Path], dict]) -> Path:
    """`final`, made by `generate(directory)` unless a complete generation by the installed grpcio-tools is
    there: file-locked, in a temporary directory renamed into place with its stamp (what `generate` returns,
    and the tools' version) written last, so no one sees a half-finished generation."""
    if _fresh(final):
        return final
    final.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(final) + ".lock"):
        if _fresh(final):
            return final
        shutil.rmtree(final, ignore_errors=True)
        tmp = Path(tempfile.mkdtemp(prefix=f".{final.name}.", dir=final.parent))
        try:
            info = generate(tmp)
            (tmp / _STAMP).write_text(json.dumps({**info, "grpcio_tools": _tools_version()}) + "\n")
            tmp.rename(final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return final


def ensure_protos(version: str) -> Path:
    """The directory to put on sys.path for the stubs of `version`, generating them once (file-locked)."""
    return build_once(protos_dir(version), functools.partial(_generate, version)) / "py"


def version_for(minor: str = DEFAULT_MINOR) -> str:
    """The k8s.io/kubelet version of a Kubernetes minor (1.34 -> v0.34.4)."""
    return release_for(minor).staging


@functools.cache
def load(minor: str = DEFAULT_MINOR) -> KubeletProtos:
    """Generate (if needed) and import the stubs for a Kubernetes minor."""
    version = version_for(minor)
    path = str(ensure_protos(version))
    if path not in sys.path:
        sys.path.append(path)  # appended: generated modules must never shadow anything else
    pkg = package_name(version)

    def mod(name: str) -> ModuleType:
        return importlib.import_module(f"{pkg}.{name}")

    return KubeletProtos(
        version=version,
        dra_v1=mod("dra_v1_pb2"), dra_v1_grpc=mod("dra_v1_pb2_grpc"),
        dra_v1beta1=mod("dra_v1beta1_pb2"), dra_v1beta1_grpc=mod("dra_v1beta1_pb2_grpc"),
        health=mod("health_v1alpha1_pb2"), health_grpc=mod("health_v1alpha1_pb2_grpc"),
        registration=mod("registration_v1_pb2"), registration_grpc=mod("registration_v1_pb2_grpc"),
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m fake_gpus.driver.kubeletplugin.protos",
                                     description="generate the kubelet plugin gRPC stubs into the dra-testbed cache")
    parser.add_argument("--k8s", default=DEFAULT_MINOR, help="Kubernetes minor (default %(default)s)")
    args = parser.parse_args(argv)
    try:
        print(ensure_protos(version_for(args.k8s)))
    except (ProtoBuildError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
