"""The fault campaign's parts without a cluster: retries through a restart, the supervisor, the leak audit."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
from kubernetes import client

from fake_gpus.driver.kubeletplugin.checkpoint import PREPARED, ClaimRecord, MigRecord, PreparedDevice
from hostenv.processes import terminate
from testbed.kube.apiretry import RetryingApiClient
from testbed.campaign.audit import NodeState, cdi_uids, double_prepared, leaks
from testbed.campaign.supervisor import Supervisor, Unit


class _Flaky(BaseHTTPRequestHandler):
    """Answers as an apiserver that is restarting: the first `fail` requests get 503 (or a dropped
    connection), then the real answer; a create that already happened gets 409."""

    plan: list[str] = []
    created: set[str] = set()
    seen: list[str] = []

    def log_message(self, *args) -> None:
        pass

    def _answer(self, status: int, body: dict) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _step(self) -> bool:
        self.seen.append(f"{self.command} {self.path}")
        action = self.plan.pop(0) if self.plan else "ok"
        if action == "503":
            self._answer(503, {"kind": "Status", "code": 503})
            return False
        if action == "drop":
            self.close_connection = True
            self.connection.close()
            return False
        return True

    def do_GET(self) -> None:
        if self._step():
            name = self.path.rsplit("/", 1)[1]
            self._answer(200 if name in self.created else 404, {"kind": "Namespace", "apiVersion": "v1", "metadata": {"name": name}})

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        name = body["metadata"]["name"]
        first = name not in self.created
        self.created.add(name)  # the server acts on it even when its answer is lost
        if self._step():
            self._answer(201 if first else 409, body if first else {"kind": "Status", "code": 409, "reason": "AlreadyExists"})

    def do_DELETE(self) -> None:
        name = self.path.rsplit("/", 1)[1]
        gone = name not in self.created
        self.created.discard(name)
        if self._step():
            self._answer(404 if gone else 200, {"kind": "Status", "code": 404 if gone else 200})


@pytest.fixture
def flaky():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Flaky)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    _Flaky.plan, _Flaky.created, _Flaky.seen = [], set(), []
    configuration = client.Configuration()
    configuration.host = f"http://127.0.0.1:{server.server_address[1]}"
    api = RetryingApiClient(configuration, budget=20)
    yield api, _Flaky
    api.close()
    server.shutdown()
    server.server_close()


def test_reads_retry_through_503s(flaky) -> None:
    api, server = flaky
    server.created.add("a")
    server.plan = ["503", "503"]
    assert client.CoreV1Api(api).read_namespace("a").metadata.name == "a"
    assert api.retries == 2


def test_a_create_whose_answer_was_lost_returns_the_object_it_made(flaky) -> None:
    api, server = flaky
    server.plan = ["drop"]  # the server created it, the answer never came; the retry is told 409
    made = client.CoreV1Api(api).create_namespace({"metadata": {"name": "b"}})
    assert made.metadata.name == "b" and api.retries == 1
    assert [s.split()[0] for s in server.seen] == ["POST", "POST", "GET"]


def test_a_plain_409_is_still_an_error(flaky) -> None:
    api, server = flaky
    server.created.add("c")
    with pytest.raises(client.ApiException) as failure:
        client.CoreV1Api(api).create_namespace({"metadata": {"name": "c"}})
    assert failure.value.status == 409


def test_a_delete_whose_answer_was_lost_counts_as_done(flaky) -> None:
    api, server = flaky
    server.created.add("d")
    server.plan = ["drop"]
    client.CoreV1Api(api).delete_namespace("d")
    assert api.retries == 1
    with pytest.raises(client.ApiException) as failure:  # without a lost answer, 404 stays 404
        client.CoreV1Api(api).delete_namespace("d")
    assert failure.value.status == 404


def test_refused_connections_are_retried_until_the_budget(tmp_path) -> None:
    configuration = client.Configuration()
    configuration.host = "http://127.0.0.1:9"  # discard port: nothing listens
    api = RetryingApiClient(configuration, budget=1.5)
    start = time.monotonic()
    with pytest.raises(Exception):
        client.CoreV1Api(api).read_namespace("x")
    elapsed = time.monotonic() - start
    # it waited 0.2 s, 0.4 s, ... between attempts and gave up only when the next wait would cross the budget
    # (on a loaded machine the attempts themselves take time, so the count of waits varies)
    waited = sum(min(0.2 * 2**i, 2.0) for i in range(api.retries))
    assert api.retries >= 2 and elapsed >= waited and elapsed + min(0.2 * 2**api.retries, 2.0) > 1.5, (api.retries, elapsed)
    api.close()


def test_a_tls_session_the_apiserver_cuts_is_retried_until_the_budget() -> None:
    """A killed apiserver cuts TLS connections: the client raises ApiException(status=0, SSLError ...), seen on
    kind as the campaign's one false failure; it is a lost answer like a reset, so it is retried."""
    listener = socket.create_server(("127.0.0.1", 0))
    accepted = []

    def cut() -> None:  # accept, then close before the TLS handshake is answered
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            accepted.append(conn)
            conn.close()

    threading.Thread(target=cut, daemon=True).start()
    configuration = client.Configuration()
    configuration.host = f"https://127.0.0.1:{listener.getsockname()[1]}"
    configuration.verify_ssl = False
    # a budget of several waits (0.2 + 0.4 + 0.8 + 1.6 s): on a starved machine one attempt alone took 1.3 s
    api = RetryingApiClient(configuration, budget=4.0)
    with pytest.raises(client.ApiException) as failure:
        client.CoreV1Api(api).read_namespace("x")
    assert failure.value.status == 0 and "SSLError" in str(failure.value.reason)
    assert api.retries >= 2 and len(accepted) == api.retries + 1
    api.close()
    listener.close()


def test_the_supervisor_restarts_a_killed_unit_with_its_command_line_and_counts_crashes(tmp_path: Path) -> None:
    script = "import os, sys, time\nwith open(sys.argv[1], 'a') as f: f.write(f'{os.getpid()} ')\nprint('up', flush=True)\ntime.sleep(600)"
    starts, log, pid_file = tmp_path / "starts", tmp_path / "unit.log", tmp_path / "unit.pid"
    with open(log, "ab") as out:
        proc = subprocess.Popen([sys.executable, "-c", script, str(starts)], stdout=out, start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 60
    while not (starts.exists() and starts.read_text().split()) and time.monotonic() < deadline:
        time.sleep(0.05)  # running its script, not only the interpreter
    unit = Unit.adopt("sleeper", "test", pid_file)
    assert unit.log == str(log)
    try:
        with Supervisor([unit], delay=0.2, period=0.05) as supervisor:
            supervisor.kill("sleeper")
            proc.wait(timeout=10)
            deadline = time.monotonic() + 60
            while (unit.restarts < 1 or unit.killed_at is not None) and time.monotonic() < deadline:
                time.sleep(0.05)
            assert unit.restarts == 1 and unit.crashes == 0 and len(unit.downtimes) == 1
            assert supervisor.outages.spans()[0][1] is not None  # the kill's span closed once it ran again
            assert int(pid_file.read_text()) == unit.pid != proc.pid
            while len(starts.read_text().split()) < 2 and time.monotonic() < deadline:
                time.sleep(0.05)  # the restarted one runs its script
            with log.open("a") as out:  # what a component says as it gives up
                out.write('E1201 14:02:29 run.go:72] "command failed" err="listen tcp 127.0.0.1:32755: bind: address already in use"\n')
            terminate(unit.pid)  # an exit nobody asked for: a crash, restarted too
            deadline = time.monotonic() + 60
            while unit.restarts < 2 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert unit.restarts == 2 and unit.crashes == 1
            assert len(unit.exit_reasons) == 1 and "address already in use" in unit.exit_reasons[0]
        deadline = time.monotonic() + 60
        while len(starts.read_text().split()) < 3 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(starts.read_text().split()) == 3 and log.read_text().count("up") == 3
    finally:
        terminate(unit.pid)


def _record(device: str, mig: tuple[str, int, int] | None = None) -> ClaimRecord:
    m = MigRecord(mig[0], 9, mig[1], mig[2]) if mig else None
    return ClaimRecord("ns", f"c-{device}", PREPARED, [PreparedDevice(["r0"], "n", device, [], f"uuid-{device}", m, created=m is not None)])


def test_leaks_are_what_nodes_hold_for_claims_that_are_gone() -> None:
    state = NodeState("n", True, instances=[("GPU-0", 0, 4), ("GPU-0", 4, 4)],
                      checkpoint={"u1": _record("gpu-0-mig-3g40gb-9-0", ("GPU-0", 0, 4))}, cdi_uids=["u1", "u2"])
    assert leaks([state], {"u1"}).total == 2  # the instance at 4 and the spec of u2
    found = leaks([state], set())
    assert len(found.prepared) == 1 and len(found.mig) == 2 and len(found.cdi) == 2
    static = NodeState("s", False, instances=[("GPU-0", 0, 1)])
    assert leaks([static], set()).total == 0  # a static layout's instances are the admin's


def test_a_device_prepared_for_two_claims_is_a_double_allocation() -> None:
    state = NodeState("n", True, checkpoint={"u1": _record("gpu-0"), "u2": _record("gpu-0"), "u3": _record("gpu-1")})
    assert len(double_prepared([state])) == 1
    assert double_prepared([NodeState("n", True, checkpoint={"u1": _record("gpu-0"), "u3": _record("gpu-1")})]) == []


def test_cdi_file_names_give_claim_uids() -> None:
    assert cdi_uids(["k8s.gpu.nvidia.com_device-claim_1234-ab.json", "other.json", "k8s.x_device-claim_9.json.tmp"]) == ["1234-ab"]


def _adopted_sleeper(pid_file: Path, name: str) -> tuple[subprocess.Popen, Unit]:
    """A process sleeping 600 s, its pid in `pid_file`, adopted as unit `name` once exec'd (a command line to adopt)."""
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    pid_file.write_text(f"{proc.pid}\n")
    deadline = time.monotonic() + 60
    while not Path(f"/proc/{proc.pid}/cmdline").read_bytes() and time.monotonic() < deadline:
        time.sleep(0.05)
    return proc, Unit.adopt(name, "test", pid_file)


def test_a_killed_unit_is_back_only_once_its_probe_says_it_serves(tmp_path: Path) -> None:
    pid_file = tmp_path / "unit.pid"
    proc, unit = _adopted_sleeper(pid_file, "slow-starter")
    serving = threading.Event()
    unit.ready = serving.is_set  # what /readyz would say: the new process runs well before it serves
    try:
        with Supervisor([unit], delay=0.1, period=0.05) as supervisor:
            supervisor.kill("slow-starter")
            proc.wait(timeout=10)
            deadline = time.monotonic() + 30
            while unit.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            time.sleep(1.5)  # running again, probed, not serving: still down
            assert unit.restarts == 1 and unit.killed_at is not None and not supervisor.all_running()
            assert supervisor.outages.excused(time.monotonic() - 1.0, time.monotonic()) == pytest.approx(1.0, abs=0.1)
            serving.set()
            assert supervisor.wait_running(timeout=10)
            assert len(unit.downtimes) == 1 and unit.downtimes[0] >= 1.5 and unit.crashes == 0
    finally:
        terminate(unit.pid)


def test_outages_excuse_the_union_of_kill_spans_within_a_window_and_no_more_than_the_cap() -> None:
    from testbed.campaign.outages import Outages

    outages = Outages(cap=100.0)
    outages.down("scheduler", at=10.0)
    outages.down("etcd", at=12.0)
    outages.down("scheduler", at=13.0)  # killed again before it was back: one span
    outages.up("scheduler", at=20.0)
    outages.up("etcd", at=15.0)
    outages.down("plugin", at=30.0)
    outages.up("plugin", at=35.0)
    assert outages.excused(0.0, 50.0) == 15.0  # [10, 20] and [30, 35]
    assert outages.excused(18.0, 32.0) == 4.0  # [18, 20] and [30, 32]
    assert outages.excused(21.0, 29.0) == 0.0
    assert Outages(cap=3.0).excused(0.0, 1.0) == 0.0
    capped = Outages(cap=3.0)
    capped.down("apiserver", at=0.0)  # never back: open to now, but a wait is excused at most the cap
    assert capped.excused(0.0, 50.0) == 3.0


def test_a_seeds_plan_is_drawn_without_a_cluster_the_same_every_time() -> None:
    from testbed.workloads.plan import plan_examples
    from testbed.workloads.steps import Arrive, Depart

    boards = ("h100-80gb", "h200-141gb")
    plans = [plan_examples(seed, 3, 6, boards) for seed in (0, 0, 1)]
    assert plans[0] == plans[1] and plans[0] != plans[2]
    for example in plans[0]:
        live: set[str] = set()
        for step in example:  # a depart only of a live pod: the recorder keeps the machine's books right
            if isinstance(step, Arrive):
                live.add(step.pod.name)
            elif isinstance(step, Depart):
                assert step.pod in live
                live.remove(step.pod)


class _NeverBack:
    """A supervisor one of whose units never serves again."""

    period = 0.05

    def all_running(self) -> bool:
        return False

    def wait_running(self, timeout: float = 120.0) -> bool:
        time.sleep(timeout)
        return False

    def of_kind(self, kind: str) -> list:
        return []


def test_stopping_the_chaos_does_not_wait_out_a_unit_that_is_not_back() -> None:
    # Ctrl-C ends a campaign through Chaos.__exit__: its thread used to sit in wait_running(120) and the exit
    # waited 60 s for it, without a word (one of the silent waits a benchmark sat through two Ctrl-Cs in)
    from testbed.campaign.chaos import Chaos

    chaos = Chaos(_NeverBack(), seed=1, limit=5, interval=(0.01, 0.02))  # type: ignore[arg-type]
    chaos.__enter__()
    time.sleep(0.5)  # the thread waits for the unit
    chaos.__exit__(None, None, None)
    # the thread ended: __exit__'s join returned because it did, not at its 60 s timeout (no timing assert)
    assert not chaos._thread.is_alive() and chaos.errors == [] and chaos.kills == []


def test_a_runners_bound_is_counted_in_up_time() -> None:
    from testbed.kube.waiting import WaitTimeout
    from testbed.workloads.runner import Runner

    calls: list[float] = []

    def never(left: float) -> None:
        calls.append(left)
        time.sleep(left)
        raise WaitTimeout(f"timed out after {left:.1f}s")

    runner = Runner(client.ApiClient(), "", bound=0.5)
    with pytest.raises(WaitTimeout) as plain:
        runner._bounded(never, 0.5)
    assert len(calls) == 1 and not getattr(plain.value, "excused", 0)  # nothing excused: one wait of the bound
    calls.clear()
    started = time.monotonic()
    runner.excused = lambda t0, t1: min(t1 - t0, 1.0)  # a component down for the first second of the wait
    with pytest.raises(WaitTimeout) as extended:
        runner._bounded(never, 0.5)
    # the bound plus the downtime, then all of that again for the clients' back-off: 2 x (0.5 + 1) s. Lower
    # bounds only (an upper bound fails on a loaded machine; the project has no timing asserts)
    assert len(calls) >= 2 and time.monotonic() - started >= 3.0, calls
    assert extended.value.excused == pytest.approx(2.5)


def test_after_kills_a_wait_gets_its_allowance_again_for_the_clients_back_off() -> None:
    # a 100-kill KWOK run failed completeness on one seed: 154 s into the wait (64 s of it outages) the
    # controller-manager had not made the pod's claim yet, its workqueue backing off 5 ms doubling per failure
    # (up to 1000 s), so its next try came up to as long after the outages as they had lasted
    from testbed.workloads.runner import allowed_wait

    assert allowed_wait(90.0, 0.0) == 90.0  # no kill: the bound alone, as strict as a run without kills
    assert allowed_wait(90.0, 64.0) == 2 * (90.0 + 64.0) > 154.0


def test_a_prepare_the_kubelet_must_retry_gets_that_retry_on_kind(tmp_path: Path) -> None:
    # a zero-kill kind run failed seed 4: a departure freed a MIG device the kubelet still held, the next pod's
    # prepare was refused ("still prepared") and the kubelet retried it at its next pod sync, 65-72 s later
    from types import SimpleNamespace

    from testbed.campaign.kind import KUBELET_RETRY
    from testbed.campaign.run import Campaign, PrepareFailure

    pod = SimpleNamespace(spec=SimpleNamespace(node_name="n", resource_claims=["c"]), metadata=SimpleNamespace(name="p3", deletion_timestamp=None))
    ready_at = [time.monotonic() + 1.5]
    target = SimpleNamespace(prepared=lambda p: time.monotonic() > ready_at[0])
    supervisor = SimpleNamespace(outages=SimpleNamespace(excused=lambda t0, t1: 0.0))
    campaign = Campaign(client.ApiClient(), "", target, supervisor, tmp_path, bound=0.5)
    campaign.core = SimpleNamespace(list_namespaced_pod=lambda namespace: SimpleNamespace(items=[pod]))
    with pytest.raises(PrepareFailure, match=r"pods \['p3'\] are bound but their claims were not prepared within 0s"):
        campaign._wait_prepared("ns")  # KWOK's stand-in: the bound alone
    ready_at[0] = time.monotonic() + 1.5
    campaign.prepare_retry = 3.0
    campaign._wait_prepared("ns")  # kind: the bound and one kubelet retry
    assert campaign.stats["prepared-pods"] == 1
    assert KUBELET_RETRY >= 90.0  # syncFrequency 60 s jittered by up to half: 65-72 s were seen


def test_a_kill_of_a_plugin_not_started_yet_is_not_counted(tmp_path: Path) -> None:
    from testbed.campaign.chaos import Chaos

    pid_file = tmp_path / "plugin.pid"  # the stand-in kubelet writes it once it starts the plugin
    unit = Unit.watched("plugin/n", "plugin", pid_file)
    with Supervisor([unit], period=0.05) as supervisor:
        with Chaos(supervisor, seed=3, limit=2, interval=(0.05, 0.1), kinds=("plugin",)) as chaos:
            time.sleep(1.0)
            assert chaos.kills == []  # kill() found nothing to kill: no kill in the count
            proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
            pid_file.write_text(f"{proc.pid}\n")
            deadline = time.monotonic() + 30
            while not chaos.kills and time.monotonic() < deadline:
                time.sleep(0.05)
            assert [k.unit for k in chaos.kills][:1] == ["plugin/n"]
            # ended, long before its 600 s: killed. Not `== -9`: the supervisor's liveness check (hostenv's alive())
            # may reap this child of ours first, and Popen then reads its status as 0 (seen once in 8 runs)
            proc.wait(timeout=10)


def test_a_kill_spares_a_process_that_got_the_pid_of_a_unit_already_gone(tmp_path: Path) -> None:
    # the pid file of a plugin that exited still names its pid; another process got that pid since: killing
    # "the plugin" SIGKILLed that process. The pid must still name the process the supervisor saw there.
    pid_file = tmp_path / "plugin.pid"
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"], start_new_session=True)
    try:
        pid_file.write_text(f"{proc.pid}\n")
        unit = Unit.watched("plugin/n", "plugin", pid_file)
        supervisor = Supervisor([unit])  # not started: kill() only
        assert unit.is_running() and unit.pid == proc.pid and unit.started is not None  # seen: that process
        unit.started -= 1  # as if the process seen at this pid had started a tick earlier: it was another one
        assert supervisor.kill("plugin/n").killed_at is None  # gone: no kill, and nothing counted
        assert proc.poll() is None and supervisor.outages.spans() == []
        unit.started += 1  # the process seen is the one running: killed
        assert supervisor.kill("plugin/n").killed_at is not None
        proc.wait(timeout=10)
    finally:
        terminate(proc.pid)


def test_an_adopted_unit_whose_pid_another_process_got_is_not_running_and_is_restarted(tmp_path: Path) -> None:
    # is_running() trusted the pid alone: an adopted unit that exited, its pid reused by an unrelated process, looked
    # running and was never restarted. It must be the process first seen at that pid (its start time).
    pid_file = tmp_path / "unit.pid"
    other, unit = _adopted_sleeper(pid_file, "sleeper")
    try:
        assert unit.is_running() and unit.started is not None
        unit.started -= 1  # the process adopted started a tick before the one at its pid now: it exited, `other` got the pid
        assert not unit.is_running()
        with Supervisor([unit], delay=0.1, period=0.05):
            deadline = time.monotonic() + 30
            while unit.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
        assert unit.restarts == 1 and unit.crashes == 1 and unit.pid != other.pid and unit.is_running()
        assert int(pid_file.read_text()) == unit.pid and other.poll() is None  # the unrelated process is left alone
    finally:
        terminate(unit.pid)
        terminate(other.pid)


def test_a_unit_that_cannot_be_restarted_leaves_the_others_supervised(tmp_path: Path) -> None:
    # an exception in one unit's restart (Popen failing) used to end the supervisor's thread: no unit was restarted
    # again, and the reason was only a thread traceback on stderr
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    broken = Unit("broken", "test", tmp_path / "broken.pid", [str(tmp_path / "no-such-binary")], str(tmp_path), {}, None, gone.pid)
    pid_file = tmp_path / "sleeper.pid"
    proc, sleeper = _adopted_sleeper(pid_file, "sleeper")
    try:
        with Supervisor([broken, sleeper], delay=0.1, period=0.05) as supervisor:
            supervisor.kill("sleeper")
            proc.wait(timeout=10)
            deadline = time.monotonic() + 30
            while sleeper.restarts < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            assert sleeper.restarts == 1 and not supervisor.all_running()  # the broken one stays down
            assert broken.exit_reasons[-1:] == [f"restart failed: FileNotFoundError: [Errno 2] No such file or directory: "
                                                f"'{tmp_path / 'no-such-binary'}'"], broken.exit_reasons
    finally:
        terminate(sleeper.pid)


class _Raising:
    """A supervisor whose kill fails as a hung `docker exec` does on kind (subprocess.TimeoutExpired)."""

    period = 0.05

    def __init__(self) -> None:
        self.units = {"plugin/n": Unit.watched("plugin/n", "plugin", Path("/nonexistent/plugin.pid"))}
        from testbed.campaign.outages import Outages

        self.outages = Outages()

    def all_running(self) -> bool:
        return True

    def wait_running(self, timeout: float = 120.0) -> bool:  # noqa: ARG002 - the Supervisor signature
        return True

    def of_kind(self, kind: str) -> list:
        return [u for u in self.units.values() if u.kind == kind]

    def kill(self, name: str) -> Unit:
        raise subprocess.TimeoutExpired(["docker", "exec", "node", "crictl", "ps"], 60)


class _Seeds:
    """run_campaign's view of a Campaign, without a cluster: every seed passes (after `wall` seconds)."""

    ready_timeout = 1.0

    def __init__(self, supervisor, wall: float = 0.0) -> None:
        self.supervisor, self.wall, self.stats = supervisor, wall, {}
        self.found: list[str] = []  # what observe() finds
        self.leftovers_fail = False

    def wait_ready(self) -> bool:
        return True

    def run_seed(self, seed: int):
        from testbed.campaign.run import SeedResult

        time.sleep(self.wall)
        return SeedResult(seed, "pass", [], [], 1, "digest", self.wall)

    def observe(self) -> list[str]:
        return list(self.found)

    def leftovers(self):
        from testbed.campaign.audit import Leaks

        if self.leftovers_fail:
            raise client.ApiException(status=503, reason="apiserver restarting")
        return Leaks()


def test_a_chaos_that_fails_says_so_and_ends_the_run() -> None:
    # the chaos thread died of the exception unheard: no error in the result, and the run went on to max_seeds
    # with no kill at all; judge() then passed it as a clean campaign
    from testbed.campaign.report import judge
    from testbed.campaign.run import run_campaign

    campaign = _Seeds(_Raising(), wall=0.05)
    chaos = run_campaign(campaign, "kind", [], kills=3, max_seeds=200, interval=(0.01, 0.02), kinds=("plugin",))  # type: ignore[arg-type]
    assert any("TimeoutExpired" in e for e in chaos.errors), chaos.errors
    assert chaos.kills == [] and 0 < len(chaos.seeds) < 200, len(chaos.seeds)
    calm = run_campaign(campaign, "kind", [], kills=0, seeds=[s.seed for s in chaos.seeds])  # type: ignore[arg-type]
    assert judge({"kills": chaos, "zero kills": calm}) == ["kills: 0 of the 3 kills asked were done"]


def test_a_runs_mean_downtime_is_of_its_own_kills() -> None:
    # a session runs the chaos and then the calm run on the same units: the calm run reported the chaos's downtimes
    from testbed.campaign.run import run_campaign

    supervisor = _Raising()
    supervisor.units["plugin/n"].downtimes.append(30.0)  # a kill of an earlier run
    calm = run_campaign(_Seeds(supervisor), "kwok", [], kills=0, seeds=[0])  # type: ignore[arg-type]
    assert calm.downtime == {} and [s.verdict for s in calm.seeds] == ["pass"]


def test_judge_fails_a_unit_that_never_came_back_and_a_run_without_its_pair() -> None:
    from testbed.campaign.chaos import Kill
    from testbed.campaign.report import judge
    from testbed.campaign.run import CampaignResult, SeedResult

    def run(kills: int, unrecovered: list[str]) -> CampaignResult:
        return CampaignResult("kwok", [], seeds=[SeedResult(0, "pass", [], [], 1, "w", 1.0)], kills_asked=kills,
                              kills=[Kill(1.0, "etcd", "etcd")] * kills, unrecovered=unrecovered)

    assert judge({"kills": run(1, []), "zero kills": run(0, [])}) == []
    lost = "not every unit served again 420 s after the last kill"
    assert judge({"kills": run(1, [lost]), "zero kills": run(0, [])}) == [f"kills: {lost}"]
    assert judge({"kills": run(1, [])}) == ["kills: no run 'zero kills' to compare it with"]


def test_kind_units_asked_from_two_threads_close_a_kill_once(monkeypatch) -> None:
    # the chaos thread and the campaign's both ask whether units run; asking closes a killed unit's outage. Unlocked,
    # both saw the kill open, and the second one's arithmetic met the first's None: TypeError in either thread
    from testbed.campaign import kind

    monkeypatch.setattr(kind, "_running_container", lambda node, name: "new-container")
    unit = kind.KindUnit("apiserver", "apiserver", "dra-control-plane", "kube-apiserver", killed="old-container",
                         killed_at=time.monotonic(), ready=lambda: time.sleep(0.3) is None)  # a /readyz that takes its time
    supervision = kind.KindSupervision([unit])
    supervision.outages.down("apiserver", unit.killed_at)
    failures: list[BaseException] = []

    def ask() -> None:
        try:
            supervision.all_running()
        except Exception as exc:  # noqa: BLE001 - what the test looks for
            failures.append(exc)

    threads = [threading.Thread(target=ask) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert failures == [] and len(unit.downtimes) == 1 and unit.killed_at is None


def test_both_backends_supervisions_and_units_are_what_the_campaign_reads() -> None:
    # chaos.py and run.py read `period` and `exit_reasons` through getattr fallbacks because nothing said
    # what a supervision is; the Supervision protocol says it, and both backends (and the tests' fake) satisfy it
    from testbed.campaign.kind import KindSupervision, KindUnit
    from testbed.campaign.supervisor import SupervisedUnit, Supervision

    kind_unit = KindUnit("etcd", "etcd", "dra-control-plane", "etcd")
    kwok_unit = Unit.watched("plugin/n", "plugin", Path("/nonexistent/plugin.pid"))
    for supervision in (Supervisor([kwok_unit]), KindSupervision([kind_unit]), _Raising()):
        assert isinstance(supervision, Supervision), type(supervision).__name__
        assert all(isinstance(u, SupervisedUnit) for u in supervision.units.values()), type(supervision).__name__
    assert kind_unit.exit_reasons == []  # the kubelet restarts what exits: nothing read here


def _benchmark():
    """benchmarks/fault_campaign.py as a module (the benchmarks are scripts, not a package)."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("fault_campaign", Path(__file__).resolve().parents[2] / "benchmarks" / "fault_campaign.py")
    assert spec and spec.loader
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    return bench


def test_the_benchmark_refuses_bad_settings_in_one_line_before_any_cluster(capsys, monkeypatch) -> None:
    bench = _benchmark()

    def no_cluster(*args, **kwargs):
        raise AssertionError("bad settings reached the cluster")  # never a bed from a unit test, refused or not

    monkeypatch.setattr(bench, "campaign_cluster", no_cluster)
    monkeypatch.setattr(bench.interrupts, "install", lambda: False)  # nor the process's signal handlers
    for argv, says in ((["--interval", "4,inf"], "finite"), (["--examples", "0"], "--examples"),
                       (["--steps", "0"], "--steps"), (["--k8s", "1.99"], "unknown Kubernetes minor"),
                       (["--backend", "kind", "--restart-backoff", "0"], "1 to 300 seconds")):
        with pytest.raises(SystemExit) as exit_:
            bench.main(argv)
        err = capsys.readouterr().err.strip().splitlines()
        assert exit_.value.code == 2 and says in err[-1], (argv, err)


def test_a_probe_of_a_server_that_cuts_its_answer_says_not_serving() -> None:
    # http.client's BadStatusLine and IncompleteRead are no OSError: a half-started apiserver's answer raised out of
    # the probe, and on kind out of all_running() into the chaos thread or the campaign's wait for the cluster
    from testbed.host.health import http_ok

    listener = socket.create_server(("127.0.0.1", 0))

    def answer_garbage() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            conn.recv(4096)
            conn.sendall(b"not an HTTP status line\r\n\r\n")
            conn.close()

    threading.Thread(target=answer_garbage, daemon=True).start()
    try:
        assert http_ok(f"http://127.0.0.1:{listener.getsockname()[1]}/readyz") is False
    finally:
        listener.close()


def _docker_stand_in(tmp_path: Path, monkeypatch, script: str) -> None:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text("#!/bin/sh\n" + script)
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", f"{bin_dir}:{__import__('os').environ['PATH']}")


def _kind_target(tmp_path: Path):
    from types import SimpleNamespace

    from testbed.campaign.kind import KindTarget

    node = SimpleNamespace(name="dyn", mode=SimpleNamespace(kind="dynamic-mig"))
    return KindTarget(SimpleNamespace(home=tmp_path, kind_name="k"), SimpleNamespace(nodes=[node]), "gpu.nvidia.com",  # type: ignore[arg-type]
                      workers={"dyn": "k-worker"})


def test_a_failed_docker_exec_on_kind_is_never_read_as_an_empty_node(tmp_path: Path, monkeypatch) -> None:
    # _exec turned every failure into "": a refused `cat` of the checkpoint read as "nothing prepared" and a
    # failed `ls /var/run/cdi` as "no CDI specs", so leftovers() saw no leak (a false pass)
    from testbed.campaign.kind import ExecError

    _docker_stand_in(tmp_path, monkeypatch, 'echo "Error response from daemon: container is paused" >&2; exit 1\n')
    with pytest.raises(ExecError, match="exit 1"):
        _kind_target(tmp_path).node_states()
    # files that are not there (exit 0, nothing printed) are a node with nothing on it
    (tmp_path / "bin" / "docker").write_text("#!/bin/sh\nexit 0\n")
    assert [(s.node, s.checkpoint, s.cdi_uids) for s in _kind_target(tmp_path).node_states()] == [("dyn", {}, [])]


def test_an_unreadable_checkpoint_is_a_harness_failure_not_an_empty_node(tmp_path: Path) -> None:
    # read_checkpoint mapped CheckpointError to {}: a corrupt or foreign checkpoint hid every prepared leak
    from fake_gpus.driver.kubeletplugin.checkpoint import CheckpointError
    from testbed.campaign.audit import read_checkpoint

    assert read_checkpoint(tmp_path / "absent.json") == {}
    (tmp_path / "cp.json").write_text('{"format": "someone-else", "claims": {}}')
    with pytest.raises(CheckpointError):
        read_checkpoint(tmp_path / "cp.json")


def test_the_chaos_keeps_its_own_observations() -> None:
    # observe() appended to a list of the Campaign that run_campaign cleared at each run's start: a chaos thread
    # still observing after its run ended put its double allocations into the next run
    from testbed.campaign.chaos import Chaos

    supervisor = _Raising()  # the kill after the first observation ends the chaos
    with Chaos(supervisor, seed=1, limit=2, interval=(0.01, 0.02), kinds=("plugin",), observe=lambda: ["gpu-0 twice"]) as chaos:  # type: ignore[arg-type]
        deadline = time.monotonic() + 30
        while not chaos.over and time.monotonic() < deadline:
            time.sleep(0.01)
    assert chaos.observed == ["gpu-0 twice"]


def test_a_failed_final_leak_check_keeps_the_run_and_fails_it() -> None:
    # an API failure in the final leftovers() lost the whole run's result
    from testbed.campaign.report import judge
    from testbed.campaign.run import run_campaign

    campaign = _Seeds(_Raising())
    campaign.found = ["n: gpu-0 prepared for claims u1 and u2"]
    campaign.leftovers_fail = True
    calm = run_campaign(campaign, "kind", [], kills=0, seeds=[0, 1])  # type: ignore[arg-type]
    assert [s.seed for s in calm.seeds] == [0, 1] and calm.observed_double == campaign.found
    assert any("final leak check failed: ApiException" in u for u in calm.unrecovered), calm.unrecovered
    assert any("final leak check failed" in p for p in judge({"kills": calm, "zero kills": calm}))


def test_the_benchmark_writes_each_run_as_it_ends(tmp_path: Path, monkeypatch) -> None:
    # campaign.json was written after all runs: an exception or Ctrl-C in a fault run lost the clean runs too
    from contextlib import contextmanager

    from testbed.campaign.run import CampaignResult

    bench = _benchmark()

    class _Session:
        def __init__(self) -> None:
            self.calls = 0

        def run(self, kills: int, **kwargs) -> CampaignResult:
            self.calls += 1
            if self.calls == 2:
                raise KeyboardInterrupt  # Ctrl-C during the zero-kill run
            return CampaignResult("kwok", [], kills_asked=kills)

    @contextmanager
    def stand_in(*args, **kwargs):
        yield _Session()

    monkeypatch.setattr(bench, "campaign_cluster", stand_in)  # never a bed from a unit test
    monkeypatch.setattr(bench.interrupts, "install", lambda: False)
    with pytest.raises(KeyboardInterrupt):
        bench.main(["--kills", "3", "--report", str(tmp_path / "r")])
    assert list(json.loads((tmp_path / "r" / "campaign.json").read_text())) == ["kills"]


def test_the_benchmark_caps_the_kind_kubelets_restart_back_off(tmp_path: Path, monkeypatch) -> None:
    # at the kubelet's default back-off (up to 5 min per container) 100 kills on kind took hours; KWOK has no kubelet
    from contextlib import contextmanager

    bench = _benchmark()
    asked: list[dict] = []

    @contextmanager
    def stand_in(*args, **kwargs):
        asked.append(kwargs)
        raise KeyboardInterrupt  # the bed's settings are all this test reads
        yield

    monkeypatch.setattr(bench, "campaign_cluster", stand_in)
    monkeypatch.setattr(bench.interrupts, "install", lambda: False)
    for argv in (["--backend", "kind"], ["--backend", "kind", "--restart-backoff", "300"], ["--backend", "kwok"]):
        with pytest.raises(KeyboardInterrupt):
            bench.main([*argv, "--report", str(tmp_path / "r")])
    assert [a.get("restart_backoff_max") for a in asked] == [10, 300, None]
    assert all(a["logs_to"] == tmp_path / "r" / "logs" for a in asked)  # every bed leaves its logs in the report


def test_a_double_allocation_is_known_by_its_kind_not_its_wording() -> None:
    # classify() matched substrings of the messages (DOUBLE_MARKS): a reworded message turned a double allocation
    # into another category, in a fault run a false "went unnoticed"
    from testbed.campaign.run import classify
    from testbed.workloads.oracle import Violation
    from testbed.workloads.runner import PropertyFailure

    failure = PropertyFailure([Violation("soundness", "gpu-0 has two owners", double=True), Violation("soundness", "device gpu-1 is allocated to 2 claims")], None)
    categories, _, _, double = classify(failure)
    assert categories == ["double-allocation", "soundness"] and double == 1


def _prepared(name: str, device: str, visible: str, mig: tuple[str, int, int] | None = None) -> ClaimRecord:
    m = MigRecord(mig[0], 9, mig[1], mig[2]) if mig else None
    return ClaimRecord("ns", name, PREPARED, [PreparedDevice(["r0"], "n", device, [], visible, m, created=m is not None)])


def test_overlapping_parts_of_one_gpu_are_a_double_prepare_and_a_hand_over_is_not() -> None:
    # keyed on device name and (gpu, start) only, a whole GPU prepared beside its MIG device, and placements
    # overlapping from different starts, were not seen; a predecessor the kubelet had not unprepared yet was
    whole = _prepared("a", "gpu-0", "GPU-0")
    mig = _prepared("b", "gpu-0-mig-3g40gb-9-0", "MIG-1", ("GPU-0", 0, 4))
    overlapping = _prepared("c", "gpu-0-mig-1g10gb-19-2", "MIG-2", ("GPU-0", 2, 1))
    disjoint = _prepared("d", "gpu-0-mig-3g40gb-9-4", "MIG-3", ("GPU-0", 4, 4))
    assert len(double_prepared([NodeState("n", True, checkpoint={"u1": whole, "u2": mig})])) == 1
    assert len(double_prepared([NodeState("n", True, checkpoint={"u2": mig, "u3": overlapping})])) == 1
    assert double_prepared([NodeState("n", True, checkpoint={"u2": mig, "u4": disjoint})]) == []
    handed_over = NodeState("n", True, checkpoint={"u1": _prepared("old", "gpu-0", "GPU-0"), "u5": _prepared("new", "gpu-0", "GPU-0")})
    assert len(double_prepared([handed_over])) == 1  # without knowing what is allocated: counted
    assert double_prepared([handed_over], allocated={("ns", "new")}) == []  # "old" is deallocated: a hand-over


def test_a_campaign_bed_is_created_again_only_after_a_failure_while_starting(monkeypatch) -> None:
    # any ClusterError was retried, a refusal before anything started too (a host without docker, a node image
    # that does not build: tried again, it fails again, after as long); only a ClusterStartError may pass next time
    from contextlib import contextmanager

    from testbed.campaign import beds
    from testbed.campaign.session import CAMPAIGN_LAYOUT
    from testbed.clusters.base import ClusterError, ClusterStartError

    class Cluster:
        def __init__(self, failures: list[Exception]) -> None:
            self.name, self.failures, self.creates, self.deleted = "campaign-t", failures, 0, False

        def create(self, spec, force: bool = False) -> None:
            self.creates += 1
            if self.failures:
                raise self.failures.pop(0)

        def delete(self) -> None:
            self.deleted = True

    @contextmanager
    def session(cluster, layout, faults, **kwargs):
        yield "session"

    monkeypatch.setattr(beds, "kwok_session", session)
    refused = Cluster([ClusterError("Cannot connect to the Docker daemon"), None])
    monkeypatch.setattr(beds, "cluster_for", lambda backend, name: refused)
    with pytest.raises(ClusterError, match="Docker daemon"):
        with beds.campaign_cluster("kwok", CAMPAIGN_LAYOUT, [], "t", "1.34"):
            pass
    assert refused.creates == 1
    lost = Cluster([ClusterStartError("kube-apiserver not healthy after 180s; components exited: ['etcd']")])
    monkeypatch.setattr(beds, "cluster_for", lambda backend, name: lost)
    with beds.campaign_cluster("kwok", CAMPAIGN_LAYOUT, [], "t", "1.34") as got:
        assert got == "session"
    assert lost.creates == 2 and lost.deleted


def test_a_kwok_up_that_fails_once_started_says_so_and_a_refusal_does_not(tmp_path: Path, monkeypatch) -> None:
    from types import SimpleNamespace

    from testbed.campaign.session import CAMPAIGN_LAYOUT
    from testbed.clusters.base import ClusterError, ClusterSpec, ClusterStartError
    from testbed.clusters.kwok import cluster as kwok
    from testbed.clusters.kwok.stages import StagesError

    monkeypatch.setenv("DRA_TESTBED_STATE", str(tmp_path))
    monkeypatch.delenv(kwok.FAILURE_LOGS_ENV, raising=False)

    class Driver:
        def spawn(self, home, kubeconfig, layout) -> None:
            raise ClusterError("the publisher exited: see publisher.log")

    monkeypatch.setattr(kwok, "kwok_driver", lambda spec: Driver())
    monkeypatch.setattr(kwok, "ensure", lambda minor, names, overrides=None: SimpleNamespace(path=lambda name: tmp_path / name))
    monkeypatch.setattr(kwok, "stages_yaml", lambda version: "")
    cluster = kwok.KwokCluster("t")
    monkeypatch.setattr(cluster, "_teardown", lambda kwokctl: None)
    with pytest.raises(ClusterStartError, match="the publisher exited"):
        cluster.create(ClusterSpec(name="t", layout=CAMPAIGN_LAYOUT))

    def no_stages(version):
        raise StagesError("no stages for kwok v0")

    monkeypatch.setattr(kwok, "stages_yaml", no_stages)
    with pytest.raises(ClusterError, match="no stages") as refused:
        kwok.KwokCluster("u").create(ClusterSpec(name="u", layout=CAMPAIGN_LAYOUT))
    assert not isinstance(refused.value, ClusterStartError)


class _Bed:
    """A cluster as the campaign's beds use one: what was done to it, in order."""

    def __init__(self) -> None:
        self.name, self.done = "campaign-x", []

    def create(self, spec, force: bool = False) -> None:
        self.done.append("create")

    def export_logs(self, folder: Path) -> Path:
        self.done.append(f"export {folder.name}")
        return folder

    def delete(self) -> None:
        self.done.append("delete")


def test_a_campaign_bed_leaves_its_logs_before_it_goes_but_not_after_an_interrupt(tmp_path: Path, monkeypatch) -> None:
    # a kind zero-kill seed failed "not prepared within 90s" and nothing was left to read why: the bed was gone
    from contextlib import contextmanager

    from testbed.campaign import beds
    from testbed.campaign.session import CAMPAIGN_LAYOUT

    bed = _Bed()

    @contextmanager
    def session(*args, **kwargs):
        yield object()

    monkeypatch.setattr(beds, "cluster_for", lambda backend, name: bed)
    monkeypatch.setattr(beds, "kwok_session", session)
    with beds.campaign_cluster("kwok", CAMPAIGN_LAYOUT, [], "x", "1.34", logs_to=tmp_path):
        pass
    assert bed.done == ["create", "export campaign-x", "delete"]
    bed.done.clear()
    with pytest.raises(KeyboardInterrupt):
        with beds.campaign_cluster("kwok", CAMPAIGN_LAYOUT, [], "x", "1.34", logs_to=tmp_path):
            raise KeyboardInterrupt
    assert bed.done == ["create", "delete"]  # Ctrl-C: removed at once
