"""Where manifests come from, as `kubectl apply -f` takes them: files, directories and `-` (standard input).

A directory gives its *.yaml, *.yml and *.json files in name order, and only its own: like `kubectl -f DIR`,
subdirectories are read only when asked (`recursive`, kubectl's -R), so a folder of examples can keep
deliberately broken ones in a subfolder. Standard input is read once, however often `-` is given.

A kustomization (`-k DIR`) gives what `kustomize build DIR` writes, a Helm chart (`--helm CHART`) what
`helm template` renders from it, offline: both tools are built from their Go modules on first use
(testbed.toolchain.renderers). Their output is one more source, read by the same loader as files.
"""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, TextIO

from hostenv.processes import run_group
from testbed.errors import BadInputError
from testbed.toolchain.renderers import ensure_renderer

SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
RENDER_TIMEOUT = 120.0  # seconds; rendering is local, a chart that takes longer is looping


class InputError(BadInputError):
    """Input that cannot be read: one line naming it and what is valid."""


@dataclass(frozen=True)
class Source:
    """The text of one input and the name it is reported by (a path, or `<stdin>`)."""

    name: str
    text: str


@dataclass(frozen=True)
class Kustomization:
    """`-k DIR`: the objects `kustomize build DIR` writes."""

    directory: Path


@dataclass(frozen=True)
class HelmChart:
    """`--helm CHART`: the objects `helm template RELEASE CHART` renders with these values files and --set pairs.

    `kube_version` is what the chart's `.Capabilities.KubeVersion` reads: the bed's release, not helm's own."""

    chart: Path
    values: tuple[Path, ...] = ()
    settings: tuple[str, ...] = ()
    release: str = "try"
    kube_version: str | None = None


Argument = str | Path | Kustomization | HelmChart


def read_sources(arguments: Iterable[Argument], recursive: bool = False, stdin: TextIO | None = None) -> list[Source]:
    """The text of every file named, found in a named directory, given on standard input (`-`), or rendered
    from a kustomization or a Helm chart."""
    sources: list[Source] = []
    read_stdin = False
    for argument in arguments:
        if isinstance(argument, Kustomization):
            sources.append(kustomize_build(argument))
            continue
        if isinstance(argument, HelmChart):
            sources.append(helm_template(argument))
            continue
        if str(argument) == STDIN:
            if not read_stdin:
                sources.append(_stdin(stdin if stdin is not None else sys.stdin))
                read_stdin = True
            continue
        path = Path(argument)
        if path.is_dir():
            files = _files_in(path, recursive)
            if not files:
                deeper = "" if recursive else " (subdirectories are read with -R)"
                raise InputError(f"{path}: no {', '.join('*' + s for s in SUFFIXES)} files in this directory{deeper}")
            sources += [_file(f) for f in files]
        else:
            sources.append(_file(path))
    return sources


def _files_in(directory: Path, recursive: bool) -> list[Path]:
    found = directory.rglob("*") if recursive else directory.iterdir()
    return sorted(p for p in found if p.suffix in SUFFIXES and p.is_file())


def _file(path: Path) -> Source:
    try:
        return Source(str(path), path.read_text())
    except OSError as exc:
        raise InputError(f"cannot read {path}: {exc.strerror}; give YAML or JSON files, directories of them, or - for standard input") from exc
    except UnicodeDecodeError as exc:
        raise InputError(f"{path} is not text (byte {exc.start} is not UTF-8); give YAML or JSON manifests") from exc


def _stdin(stream: TextIO | None) -> Source:
    if stream is None or stream.closed:
        raise InputError("cannot read standard input (-): it is closed; pipe YAML manifests in, e.g. kubectl kustomize DIR | dra-testbed try - ...")
    try:
        return Source("<stdin>", stream.read())
    except UnicodeDecodeError as exc:
        raise InputError(f"standard input (-) is not text (byte {exc.start} is not UTF-8); pipe YAML manifests in") from exc
    except (OSError, ValueError) as exc:  # ValueError: detached or closed underneath (`<&-`)
        raise InputError(f"cannot read standard input (-): {getattr(exc, 'strerror', None) or exc}; pipe YAML manifests in") from exc


def kustomize_build(kustomization: Kustomization) -> Source:
    """`kustomize build DIR`'s output; InputError with kustomize's first error line when it refuses."""
    directory = kustomization.directory
    if not directory.is_dir():
        problem = "not a directory" if directory.exists() else "no such directory"
        raise InputError(f"-k {directory}: {problem}; give a directory holding a kustomization.yaml")
    if not any((directory / name).is_file() for name in KUSTOMIZATION_FILES):
        raise InputError(f"-k {directory}: no kustomization.yaml in it; give a directory holding one (or pass its files with -f)")
    binary = ensure_renderer("kustomize")
    return _rendered(f"{directory} (kustomize build)", [str(binary), "build", str(directory)], f"-k {directory}")


def helm_template(chart: HelmChart) -> Source:
    """`helm template`'s output (CRDs of the chart's crds/ included, as `helm install` creates them);
    InputError with helm's first error line when it refuses."""
    if not (chart.chart.is_dir() and (chart.chart / "Chart.yaml").is_file()) and not chart.chart.is_file():
        problem = "not a chart (no Chart.yaml in it)" if chart.chart.is_dir() else "no such chart"
        raise InputError(f"--helm {chart.chart}: {problem}; give a chart directory (holding Chart.yaml) or a packaged "
                         ".tgz (repositories are not reached: fetch the chart first)")
    for values in chart.values:
        if not values.is_file():
            raise InputError(f"--values {values}: no such file; give a YAML file of chart values")
    args = [str(ensure_renderer("helm")), "template", chart.release, str(chart.chart), "--include-crds"]
    if chart.kube_version:
        args += ["--kube-version", chart.kube_version]
    for values in chart.values:
        args += ["--values", str(values)]
    for setting in chart.settings:
        args += ["--set", setting]
    return _rendered(f"{chart.chart} (helm template)", args, f"--helm {chart.chart}")


def _rendered(name: str, args: list[str], what: str) -> Source:
    try:
        done = run_group(args, timeout=RENDER_TIMEOUT)
    except subprocess.TimeoutExpired as exc:
        raise InputError(f"{what}: rendering took over {RENDER_TIMEOUT:.0f}s; give a chart or kustomization that renders") from exc
    if done.returncode != 0:
        raise InputError(f"{what}: {_first_error(done.stderr or done.stdout)}")
    return Source(name, done.stdout)


def _first_error(output: str) -> str:
    """The tool's first error line, without its `Error: ` prefix (kustomize and helm both write one)."""
    lines = [line.strip() for line in output.splitlines() if line.strip()]
    errors = [line for line in lines if line.lower().startswith("error")]
    first = (errors or lines or ["failed with no message"])[0]
    return first.removeprefix("Error: ").removeprefix("error: ")
