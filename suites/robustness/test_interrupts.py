"""SIGINT, SIGTERM and SIGHUP at several phases of `dra-testbed up` and of a pytest session leave nothing.

Each run gets a state directory of its own ($DRA_TESTBED_STATE), which every component's command line
names; afterwards no process may name it, no port it listened on may still listen, nothing may be
mounted under it and only kwokctl's creation lock may remain in it.
"""

from __future__ import annotations

import signal
import sys
import textwrap
import time
from pathlib import Path

import pytest
import yaml

from hostenv import processes
from interrupt_helpers import SIGNALS, Phase, interrupt_at
from testbed.host import leftovers

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

NAME = "intr"
KEEP = (".create.lock",)
# a few nodes, so the phase after the control plane (nodes, slices, publisher) lasts long enough to hit
NODES = [f"--node=n{i}=h100-80gb:8:dynamic-mig" for i in range(6)]


def _home(state: Path) -> Path:
    return state / "clusters" / "kwok" / NAME


def _kwok(state: Path) -> Path:
    return state / "kwok" / "clusters" / NAME


UP_PHASES = (
    Phase("starting", lambda state, err: True),  # imports, layout check, toolchain look-up
    Phase("publisher-spawned", lambda state, err: (_home(state) / "publisher.pid").exists()),
    Phase("control-plane", lambda state, err: len(list((_kwok(state) / "pids").glob("*.pid"))) >= 2),
    Phase("adding-nodes", lambda state, err: "starting kwok cluster" in err and "✓" in err),
)


def _ports(state: Path) -> tuple[int, ...]:
    return _ports_in(_kwok(state) / "kwok.yaml")


def _ports_in(config: Path) -> tuple[int, ...]:
    """The ports a kwokctl cluster's configuration (its kwok.yaml) gives its components."""
    try:
        for doc in yaml.safe_load_all(config.read_text()):
            if isinstance(doc, dict) and doc.get("kind") == "KwokctlConfiguration":
                return tuple(v for k, v in (doc.get("options") or {}).items() if k.endswith("Port") and type(v) is int and v > 0)
    except (OSError, yaml.YAMLError):
        pass
    return ()


def assert_nothing_left(state: Path, ports: tuple[int, ...]) -> None:
    deadline = time.monotonic() + 5  # a component killed just now may take a moment to release its port
    while (found := leftovers.scan(state, ports, keep=KEEP)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not found, f"left behind: {found.summary()}"


@pytest.fixture
def state(tmp_path: Path):
    """The run's state directory. Whatever a failed case left running there is stopped afterwards, so one
    failure cannot leave a cluster running through the rest of the suite."""
    path = tmp_path / "state"
    yield path
    for pid in leftovers.scan(path, keep=KEEP).processes:
        processes.terminate(pid)


@pytest.mark.parametrize("phase", UP_PHASES, ids=str)
@pytest.mark.parametrize("signum", SIGNALS, ids=lambda s: signal.Signals(s).name)
def test_signal_during_up_cleans_up_everything(state: Path, phase: Phase, signum: int) -> None:
    code, err, ports = interrupt_at([sys.executable, "-m", "testbed.cli", "up", "--name", NAME, *NODES], state, phase, signum,
                                     ports_of=_ports)
    # Died of it before the CLI installed its handlers: nothing had started yet. Either the default action, or
    # SIGINT as Python's own KeyboardInterrupt: while the modules load (exit -2 with a traceback), or in the
    # interpreter's first milliseconds, which CPython reports as a fatal error of its start-up (`init_import_site`,
    # `init_sys_streams`; seen once on a loaded CI machine). Only "starting" may end so.
    before_the_cli = code == -signum or err.startswith("Fatal Python error: init_")
    if before_the_cli:
        assert phase.name == "starting", err[-600:]
    else:
        assert "Traceback" not in err
        assert code == 128 + signum, err[-600:]
        assert err.strip().splitlines()[-1].startswith("dra-testbed: error: interrupted"), err[-600:]
    assert_nothing_left(state, ports)


SESSION_TEST = textwrap.dedent("""
    import time
    from pathlib import Path

    def test_holds_the_bed(testbed):
        (Path(__file__).parent / "in-test").touch()
        time.sleep(300)
""")

SESSION_PHASES = (
    Phase("fixture-setup", lambda state, err: (_home(state) / "publisher.pid").exists()),
    Phase("test-body", lambda state, err: (state.parent / "session" / "in-test").exists()),
)


@pytest.mark.parametrize("phase", SESSION_PHASES, ids=str)
@pytest.mark.parametrize("signum", (signal.SIGTERM, signal.SIGHUP), ids=lambda s: signal.Signals(s).name)
def test_signal_during_a_pytest_session_tears_the_bed_down(tmp_path: Path, state: Path, phase: Phase, signum: int) -> None:
    """The session fixture's cluster goes away when pytest is stopped by SIGTERM or SIGHUP."""
    folder = tmp_path / "session"
    folder.mkdir()
    (folder / "test_hold.py").write_text(SESSION_TEST)
    layout = folder / "layout.yaml"
    layout.write_text(yaml.safe_dump({"nodes": [{"name": "g0", "board": "h100-80gb", "count": 2}]}))
    args = [sys.executable, "-m", "pytest", "-q", "-p", "testbed.pytest.plugin", "-p", "no:cacheprovider",
            "--rootdir", str(folder), "--cluster-name", NAME, "--layout", str(layout), str(folder / "test_hold.py")]
    code, err, ports = interrupt_at(args, state, phase, signum, ports_of=_ports)
    assert code != 0
    assert_nothing_left(state, ports)


PORTS_TEST = "suites/robustness/test_kwok_ports.py::test_a_killed_scheduler_restarts_though_a_plain_kwokctl_cluster_was_made_meanwhile"


class _PlainClusterStarting:
    """The ports test's own kwokctl cluster has started a component; its ports and the bed's, noted then
    (both clusters' files are gone after the teardown)."""

    def __init__(self, basetemp: Path) -> None:
        self.basetemp, self.ports = basetemp, ()

    def __call__(self, state: Path, err: str) -> bool:
        if not any(self.basetemp.glob("*/kwok/clusters/ports-other/pids/*.pid")):
            return False
        configs = [*self.basetemp.glob("*/kwok/clusters/*/kwok.yaml"), *state.glob("kwok/clusters/*/kwok.yaml")]
        self.ports = tuple(port for config in configs for port in _ports_in(config))
        return True


def test_sigint_while_the_ports_test_makes_its_own_kwokctl_cluster_leaves_nothing(tmp_path: Path, state: Path) -> None:
    """That cluster is no test bed (its components run in sessions of their own, which a Ctrl-C never reaches):
    a SIGINT while kwokctl makes it once left all five running."""
    basetemp = tmp_path / "basetemp"
    starting = _PlainClusterStarting(basetemp)
    args = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--basetemp", str(basetemp), PORTS_TEST]
    try:
        code, err, _ = interrupt_at(args, state, Phase("plain-cluster-starting", starting), signal.SIGINT)
        assert code == pytest.ExitCode.INTERRUPTED, err[-600:]
        deadline = time.monotonic() + 5  # a component killed just now may take a moment to release its port
        while ((found := leftovers.scan(tmp_path, starting.ports)).processes or found.ports) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not (found.processes or found.ports), f"left behind: {found.summary()}"
    finally:
        for pid in leftovers.scan(tmp_path).processes:  # the state fixture looks in the bed's state only
            processes.terminate(pid)
