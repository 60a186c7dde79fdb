"""DRA device selectors evaluated by the scheduler's own CEL compiler, through a small Go helper.

The helper (`dra_cel.go` and the device conversion of the minor) links k8s.io/dynamic-resource-allocation/cel of the cluster's minor, so an
expression matches, fails to compile or errors at run time exactly as it does inside kube-scheduler:
the same function library (quantity, semver, ...), the same cost limits, the same messages. It is built
once per minor from Go modules into the cache; the Go build cache left by the Kubernetes build makes
that a matter of seconds.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Mapping, Sequence

from filelock import FileLock

from hostenv.dirs import cache_root
from hostenv.goenv import go_binary, go_env
from hostenv.versions import release_for
from testbed.errors import EnvironmentProblem
from testbed.host import progress
from testbed.toolchain.gobuild import run_go

SOURCE = Path(__file__).with_name("dra_cel.go")
# 1.38 interned the CEL input's attributes (k8s.io/dynamic-resource-allocation/api.DeviceAttributes): one file
# per shape of the input, the main program shared
DEVICE_SOURCES = {False: Path(__file__).with_name("dra_cel_maps.go"), True: Path(__file__).with_name("dra_cel_slices.go")}
INTERNED_FROM = (1, 38)
_POSITION = re.compile(r"ERROR: <input>:(\d+):(\d+): ([^\n]*)")


class CelHelperError(EnvironmentProblem):
    """The helper could not be built or did not answer; the message is one line."""


@dataclass(frozen=True)
class Evaluation:
    """One expression over a list of devices: its compile error, or per device a match and a run-time error."""

    expression: str
    compile_error: str | None
    matches: tuple[bool, ...]
    errors: tuple[str, ...]

    def position(self) -> tuple[int, int, str] | None:
        """(line, column, message) of the first compile error, as CEL reports it."""
        return error_position(self.compile_error or "")


def error_position(message: str) -> tuple[int, int, str] | None:
    """(line, column, message) of the first `ERROR: <input>:L:C: ...` in a CEL error message."""
    found = _POSITION.search(message)
    return (int(found[1]), int(found[2]), found[3].strip()) if found else None


@functools.cache
def _sources_digest(interned: bool) -> str:
    """A digest of the helper's sources for one input shape, read once per process (every evaluate() asks)."""
    return hashlib.sha256((SOURCE.read_text() + DEVICE_SOURCES[interned].read_text()).encode()).hexdigest()[:10]


def helper_path(minor: str) -> Path:
    """The helper binary for `minor`, built when not cached."""
    release = release_for(minor)
    interned = tuple(int(x) for x in release.minor.split(".")) >= INTERNED_FROM
    digest = _sources_digest(interned)  # a changed helper is rebuilt, not taken from the cache
    home = cache_root() / "tools" / f"dra-cel-{release.staging}-{digest}"
    binary = home / "dra-cel"
    if binary.is_file():
        return binary
    home.mkdir(parents=True, exist_ok=True)
    with FileLock(str(home) + ".lock"):
        if binary.is_file():
            return binary
        work = home / "src"
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir()
        (work / "main.go").write_text(SOURCE.read_text())
        (work / "device.go").write_text(DEVICE_SOURCES[interned].read_text())
        (work / "go.mod").write_text(
            "module dratestbed.local/cel\n\ngo 1.24.0\n\n"
            f"require k8s.io/dynamic-resource-allocation {release.staging}\n"
            f"require k8s.io/api {release.staging}\n")
        env = go_env(CGO_ENABLED="0")
        log = home / "build.log"
        with progress.step(f"building the CEL helper for Kubernetes {release.minor}") as step:
            try:
                run_go([go_binary(), "mod", "tidy"], work, log, step.tick, env)
                run_go([go_binary(), "build", "-trimpath", "-ldflags", "-s -w", "-o", str(binary) + ".partial", "."],
                       work, log, step.tick, env)
            except Exception as exc:  # noqa: BLE001 - BuildError or GoMissingError: one line for the user
                raise CelHelperError(str(exc).splitlines()[0]) from exc
        os.replace(str(binary) + ".partial", binary)
    return binary


def evaluate(minor: str, expressions: Sequence[str], devices: Sequence[tuple[str, Mapping]],
             consumable_capacity: bool = False) -> list[Evaluation]:
    """Evaluate each expression on each (driver, resource.k8s.io/v1 device dict) pair."""
    if not expressions:
        return []
    payload = {"consumableCapacity": consumable_capacity, "expressions": list(expressions),
               "devices": [{"driver": driver, "device": device} for driver, device in devices]}
    out = subprocess.run([str(helper_path(minor))], input=json.dumps(payload), capture_output=True, text=True, timeout=120)
    if out.returncode != 0:
        raise CelHelperError(f"CEL helper failed: {(out.stderr.strip() or 'no output').splitlines()[-1]}")
    return [Evaluation(expression, raw.get("error") or None, tuple(raw["matches"]), tuple(raw["errors"]))
            for expression, raw in zip(expressions, json.loads(out.stdout))]
