"""SIGINT, SIGTERM and SIGHUP during the kind suite's session fixture (suites/kind_bed.py's kind_bed) leave
nothing: no node container, no process naming the run's state directory, no mount under it and no stale mount
of ours, and no dockerd when the run started it. On real kind at three phases, and with a stand-in for kind
whose `docker run`s are still making the node containers when SIGTERM comes (no Kubernetes in them)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest

from interrupt_helpers import SIGNALS, Phase, interrupt_at
from suites.processes import mentioning
from testbed.host import leftovers
from testbed.host.docker.dockerd import engine_running

pytestmark = [pytest.mark.cluster, pytest.mark.kind, pytest.mark.slow]

SESSION_TEST = textwrap.dedent("""
    import time
    from pathlib import Path

    from suites.kind_bed import kind_bed  # noqa: F401 - the fixture under test

    def test_holds_the_kind_bed(kind_bed):
        (Path(__file__).parent / "in-test").touch()
        time.sleep(900)
""")


class _Containers:
    """Whether the cluster's node containers exist yet (docker asked at most once a second)."""

    def __init__(self, name: str) -> None:
        self.name, self.last, self.seen = name, 0.0, False

    def __call__(self, state: Path, err: str) -> bool:
        if not self.seen and time.monotonic() - self.last > 1.0:
            self.last = time.monotonic()
            self.seen = bool(_node_containers(self.name))
        return self.seen


def _node_containers(name: str) -> list[str]:
    out = subprocess.run(["docker", "ps", "-a", "--filter", f"label=io.x-k8s.kind.cluster={name}", "--format", "{{.Names}}"],
                         capture_output=True, text=True, timeout=60)
    return out.stdout.split()


def _making_containers(name: str) -> list[int]:
    """Docker CLIs still making a node container of cluster `name` (their command line carries its label)."""
    return mentioning(f"io.x-k8s.kind.cluster={name}")


def _phases(name: str) -> list[Phase]:
    return [Phase("node-containers", _Containers(name)),
            Phase("deploying-driver", lambda state, err: "waiting for every node to be Ready" in err),
            Phase("test-body", lambda state, err: (state.parent / "session" / "in-test").exists())]


PHASES = ("node-containers", "deploying-driver", "test-body")
# each case brings real kind up: by default the one that left node containers (SIGTERM while kind makes them);
# DRA_TESTBED_INTERRUPT_FULL=1 runs every signal at every phase (9 runs)
CASES = ([(s, p) for s in SIGNALS for p in PHASES] if os.environ.get("DRA_TESTBED_INTERRUPT_FULL")
         else [(signal.SIGTERM, "node-containers")])


@pytest.mark.parametrize(("signum", "phase_name"), CASES, ids=lambda v: v if isinstance(v, str) else signal.Signals(v).name)
def test_signal_during_the_kind_fixture_leaves_nothing(tmp_path: Path, signum: int, phase_name: str) -> None:
    _interrupt_and_check(tmp_path, signum, phase_name)


# kind, as far as the teardown is concerned: `create cluster` makes the node containers with `docker run`s, the
# workers' slowly (the docker CLI's request under way for 10 s, as on a loaded machine), then waits as kind does
# while kubeadm runs; `export logs` and `delete cluster` as kind does them. No Kubernetes runs in the containers.
STAND_IN_KIND = """#!/bin/bash
name=kind; config=; while [ $# -gt 0 ]; do
  case "$1" in --name) name=$2;; --config) config=$2;; esac; args="$args $1"; shift; done
case "$args" in
" create cluster"*)
  image=$(awk '$1 == "image:" {print $2; exit}' "$config")  # each node's image is in the config
  for node in control-plane worker worker2 worker3; do
    cli=docker; [ $node != control-plane ] && cli=DIR/slow-docker
    $cli run --detach --label io.x-k8s.kind.cluster=$name --name $name-$node --entrypoint sleep $image 3600 >/dev/null &
  done
  wait; sleep 3600;;
" export logs"*) sleep 1;;
" delete cluster"*) ids=$(docker ps -aq --filter label=io.x-k8s.kind.cluster=$name); [ -z "$ids" ] || docker rm -f -v $ids;;
esac
"""


def test_sigterm_while_kinds_docker_runs_are_under_way_leaves_no_node_container(tmp_path: Path) -> None:
    # the cause of the node containers SIGTERM left during `kind create`: kind went at once, its `docker run`s
    # did not, and made their containers after the teardown had looked (kind_cli.py now lets them finish first)
    tools = tmp_path / "stand-in"
    tools.mkdir()
    (tools / "slow-docker").write_text('#!/bin/bash\nsleep 10\nexec docker "$@"\n')
    (tools / "kind").write_text(STAND_IN_KIND.replace("DIR", str(tools)))
    for script in tools.iterdir():
        script.chmod(0o755)
    _interrupt_and_check(tmp_path, signal.SIGTERM, "node-containers", {"DRA_TESTBED_BINARY_KIND": str(tools / "kind")})


def _interrupt_and_check(tmp_path: Path, signum: int, phase_name: str, env: dict[str, str] | None = None) -> None:
    """Run the kind fixture, send `signum` at `phase_name`, and check that nothing is left."""
    name = f"intr-kind-{uuid.uuid4().hex[:6]}"
    phase = next(p for p in _phases(name) if p.name == phase_name)
    folder = tmp_path / "session"
    folder.mkdir()
    (folder / "test_hold.py").write_text(SESSION_TEST)
    state = tmp_path / "state"
    engine_before = engine_running()
    stale_before = set(leftovers.stale_mounts())
    links_before = set(leftovers.links())
    args = [sys.executable, "-m", "pytest", "-q", "-s", "-p", "testbed.pytest.plugin", "-p", "no:cacheprovider",
            "--rootdir", str(folder), str(folder / "test_hold.py")]
    try:
        code, err, _ = interrupt_at(args, state, phase, signum, timeout=1200, env={"DRA_TESTBED_KIND_CLUSTER": name, **(env or {})})
        assert code != 0, err[-600:]
        assert "Traceback" not in err.split("short test summary")[0][-3000:] or "KeyboardInterrupt" in err, err[-1500:]
        deadline = time.monotonic() + 60
        while _making_containers(name) and time.monotonic() < deadline:
            time.sleep(0.5)  # a docker CLI the run left still making one of its containers: judge once it is done
        deadline = time.monotonic() + 30
        while (left := _node_containers(name)) and time.monotonic() < deadline:
            time.sleep(1)
        assert left == [], f"node containers left after {signal.Signals(signum).name} at {phase_name}: {left}\n{err[-2500:]}"
        found = leftovers.scan(state)
        assert not (found.processes or found.mounts), f"left behind: {found.summary()}"
        assert set(leftovers.stale_mounts()) <= stale_before, sorted(set(leftovers.stale_mounts()) - stale_before)
        if not engine_before:
            assert not engine_running(), "the dockerd this run started still runs"
            assert set(leftovers.links()) <= links_before, f"interfaces left: {sorted(set(leftovers.links()) - links_before)}"
    finally:  # a failed case must not leave a kind cluster running through the rest of the suite
        for container in _node_containers(name):
            subprocess.run(["docker", "rm", "-f", container], capture_output=True, timeout=120)
