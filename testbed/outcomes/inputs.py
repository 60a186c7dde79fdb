"""Where manifests come from, as `kubectl apply -f` takes them: files, directories and `-` (standard input).

A directory gives its *.yaml, *.yml and *.json files in name order, and only its own: like `kubectl -f DIR`,
subdirectories are read only when asked (`recursive`, kubectl's -R), so a folder of examples can keep
deliberately broken ones in a subfolder. Standard input is read once, however often `-` is given.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable, TextIO

from testbed.errors import BadInputError

SUFFIXES = (".yaml", ".yml", ".json")
STDIN = "-"


class InputError(BadInputError):
    """Input that cannot be read: one line naming it and what is valid."""


@dataclass(frozen=True)
class Source:
    """The text of one input and the name it is reported by (a path, or `<stdin>`)."""

    name: str
    text: str


def read_sources(arguments: Iterable[str | Path], recursive: bool = False, stdin: TextIO | None = None) -> list[Source]:
    """The text of every file named, found in a named directory, or given on standard input (`-`)."""
    sources: list[Source] = []
    read_stdin = False
    for argument in arguments:
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
