"""SIGINT, SIGTERM and SIGHUP during a real driver image build leave nothing: no process, no temporary
directory, no half-written cache entry, no build container, no half-made image.

Each case builds from a copy of the project whose driver files differ (a marker file), so the image's
tag is new and the build really runs; for the dependency phase the copy's pyproject.toml differs too, so
the cached Python dependencies are really installed again (into the shared cache's `.partial` entry).
"""

from __future__ import annotations

import os
import shutil
import signal
import sys
import textwrap
import time
import uuid
from pathlib import Path
from typing import Iterator

import pytest

from hostenv import processes
from hostenv.dirs import cache_root
from interrupt_helpers import SIGNALS, Phase, interrupt_at
from testbed.host import leftovers
from testbed.host.docker.dockerd import docker, ensure_engine, image_present, stop_engine_if_idle
from testbed.clusters.kind.images.driver_image import driver_reference
from testbed.clusters.kind.images.node_image import ensure_base_image

pytestmark = [pytest.mark.kind, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]
BUILD = textwrap.dedent("""
    import sys
    from testbed.host import interrupts
    interrupts.install()
    try:
        from testbed.clusters.kind.images.driver_image import ensure_driver_image
        print(ensure_driver_image(), flush=True)
    except KeyboardInterrupt:
        print("image build: interrupted", file=sys.stderr, flush=True)
        sys.exit(interrupts.exit_code())
""")


def deps_root() -> Path:
    return cache_root() / "images" / "python-deps"


def container_exists(name: str) -> bool:
    return name in docker("ps", "-a", "--filter", f"name={name}", "--format", "{{.Names}}").stdout.split()


def reference_of(copy: Path) -> str:
    """The tag the build of `copy` makes (all its inputs but our files are cached, and the same here)."""
    from fake_gpus.driver.kubeletplugin.protos import ensure_protos, version_for
    from fake_gpus.nvml.build import ensure_library

    return driver_reference(ensure_base_image(), [ensure_library(), ensure_protos(version_for("1.34"))], root=copy)


class Build:
    """One interrupted build: its project copy, its TMPDIR, and what the machine held before it."""

    def __init__(self, root: Path, new_deps: bool) -> None:
        self.copy, self.tmp = root / "project", root / "tmp"
        for name in ("fake_gpus", "hostenv", "testbed", "pyproject.toml"):
            source = REPO / name
            if source.is_dir():
                shutil.copytree(source, self.copy / name, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
            else:
                shutil.copy2(source, self.copy / name)
        marker = uuid.uuid4().hex
        (self.copy / "fake_gpus" / "interrupt-probe.txt").write_text(marker)  # a new driver image tag
        if new_deps:  # a new dependency cache key
            with (self.copy / "pyproject.toml").open("a") as handle:
                handle.write(f"\n# interrupt probe {marker}\n")
        self.tmp.mkdir()
        deps_root().mkdir(parents=True, exist_ok=True)
        self.deps = set(deps_root().iterdir())
        self.reference = reference_of(self.copy)
        self.container: str | None = None  # the build container, once seen
        self.next_look = 0.0

    def new_deps(self) -> set[Path]:
        return set(deps_root().iterdir()) - self.deps

    def copying_into_container(self) -> bool:
        """Whether the build runs `docker cp` of its tree (under our TMPDIR) into its container; notes the container.
        Looks at most every 0.2 s: reading every process's command line is not free on a busy machine."""
        if time.monotonic() < self.next_look:
            return False
        self.next_look = time.monotonic() + 0.2
        for line in leftovers.processes().values():
            words = line.split()
            if words[:2] == ["docker", "cp"] and str(self.tmp) in line:
                self.container = words[-1].split(":")[0]
                return True
        return False

    def processes(self) -> dict[int, str]:
        """Processes whose command line names the copy, the TMPDIR or a cache entry this build made (pip)."""
        markers = (str(self.copy), str(self.tmp), *map(str, self.new_deps()))
        return {pid: line for pid, line in leftovers.processes().items()
                if any(m in line for m in markers) and pid != os.getpid()}

    def left(self) -> list[str]:
        """What this build left on the machine."""
        found = [f"process {pid}: {line[:120]}" for pid, line in self.processes().items()]
        found += [f"temp {p.name}" for p in self.tmp.iterdir()]
        found += [f"cache entry {p.name}" for p in self.new_deps()]
        found += [f"container {self.container}"] if self.container and container_exists(self.container) else []
        found += [f"image {self.reference}"] if image_present(self.reference) else []
        return found

    def remove_leftovers(self) -> None:
        """After a failed case: stop and remove what it left, so it cannot spoil the next one."""
        for pid in self.processes():
            processes.terminate(pid)
        for entry in self.new_deps():
            shutil.rmtree(entry, ignore_errors=True)
        if self.container:
            docker("rm", "-f", self.container, check=False)
        docker("rmi", self.reference, check=False)


PHASES = {  # when a build is in that phase
    "python-deps": lambda build: any(p.suffix == ".partial" for p in build.new_deps()),  # pip into the cache
    "overlay": lambda build: any(build.tmp.glob("dra-testbed-driver-*")),  # the image's tree being assembled
    "docker": Build.copying_into_container,  # docker create, cp, commit
}
# every phase with SIGTERM (what runners send), every signal in the longest phase
CASES = [("python-deps", signal.SIGTERM), ("overlay", signal.SIGTERM), *(("docker", s) for s in SIGNALS)]


@pytest.fixture(scope="module", autouse=True)
def engine() -> Iterator[None]:
    """A Docker engine for the builds; one started here is stopped afterwards."""
    started = ensure_engine() == "started"
    yield
    if started:
        stop_engine_if_idle()


@pytest.mark.parametrize(("phase", "signum"), CASES, ids=[f"{p}-{signal.Signals(s).name}" for p, s in CASES])
def test_signal_during_a_driver_image_build_leaves_nothing(tmp_path: Path, phase: str, signum: int) -> None:
    build = Build(tmp_path, new_deps=phase == "python-deps")
    try:
        reached = Phase(phase, lambda state, err: PHASES[phase](build))
        code, err, _ = interrupt_at([sys.executable, "-c", BUILD], tmp_path / "state", reached, signum, timeout=900,
                                    env={"TMPDIR": str(build.tmp)}, cwd=build.copy)
        left = build.left()
        assert not left, f"left behind: {left}"
        assert "Traceback" not in err, err[-800:]
        assert code == 128 + signum, err[-800:]
    finally:
        build.remove_leftovers()
