"""Ctrl-C at any moment leaves nothing: SIGINT to the process group of a run, as a terminal sends it, at
random moments, each followed by a scan for what the run left.

    python benchmarks/interrupt_anywhere.py [--runs 20] [--seed S] [--target tests|conformance|try|density ...]
                                            [--max-delay 90] [--wait 120] [--report FILE.json] [--keep]

Targets (each started in a session and process group of its own, as a shell starts a foreground job):

  tests        python -m pytest suites/conformance/test_fault_matrix.py -x -q: the `nox -s tests` part that brings
               up conformance KWOK beds (the no-fault row through `dra-testbed conformance`, then a bed per fault
               switch through conformance.beds.kwok_bed); most of its time is bed set-up and teardown
  conformance  dra-testbed conformance --backend kwok --k8s 1.34 --report DIR
  try          dra-testbed try clusters/examples/whole-gpu-by-memory.yaml --fleet h100-only
  density      dra-testbed density --trace suites/density/data/default-head60.csv --limit 20
               --fleet clusters/layouts/density-h100.yaml --modes whole

Each run gets a state directory of its own ($DRA_TESTBED_STATE) and a marker in its environment
($DRA_TESTBED_INTERRUPT_RUN), which every process it starts inherits, whatever session it moves to. After
the run has exited (up to --wait seconds after the SIGINT; then its group is SIGKILLed and that counts as a
finding) the scan looks for: processes carrying the marker or naming the state directory (etcd, kube-*,
kwok, the publisher, plugins, the stand-in kubelet, a dockerd/containerd of ours), members of its process
group, TCP ports those processes listen on and ports listening now that did not before the run and are held by
such a process, new docker containers, mounts under the state directory and new stale mounts of ours
(testbed.host.leftovers), cluster directories under the state root left non-empty, and the clusters' plugin socket
folders in the temporary directory.

One line per run (target, delay, exit code, leftovers), then `N runs, M with leftovers`; exit 1 when any run
left something (or hung), 0 otherwise, 2 on bad settings. Whatever a run left is cleaned up afterwards
(`dra-testbed down --name X --backend B` for each cluster in its state, then its processes are ended), so the
machine is clean after the benchmark, findings or not.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from hostenv import processes as procs  # noqa: E402
from hostenv.mounts import mounted_below  # noqa: E402
from testbed.host import leftovers  # noqa: E402

TARGETS = ("tests", "conformance", "try", "density")
MARKER_ENV = "DRA_TESTBED_INTERRUPT_RUN"
K8S = "1.34"
MIN_DELAY = 2.0
KEEP_FILES = (".create.lock",)  # kwokctl's creation lock: reused by every later creation, not a leftover
TRY_EXAMPLE = "clusters/examples/whole-gpu-by-memory.yaml"
TRY_FLEET = "h100-only"
DENSITY_TRACE = "suites/density/data/default-head60.csv"
DENSITY_FLEET = "clusters/layouts/density-h100.yaml"
TESTS_SELECTION = ("suites/conformance/test_fault_matrix.py",)


def _cli() -> list[str]:
    """`dra-testbed` of this interpreter's environment, else the same entry point as a module."""
    exe = Path(sys.executable).parent / "dra-testbed"
    return [str(exe)] if exe.is_file() else [sys.executable, "-m", "testbed.cli"]


def command(target: str, run_dir: Path, selection: tuple[str, ...] = TESTS_SELECTION) -> tuple[list[str], dict[str, str]]:
    """The command line of `target` and what it adds to the environment; its files go under `run_dir`; `selection`:
    the tests of the `tests` target."""
    if target == "tests":
        return ([sys.executable, "-m", "pytest", *selection, "-x", "-q", "-p", "no:cacheprovider",
                 "--basetemp", str(run_dir / "basetemp"), "--k8s", K8S],
                {"DRA_TESTBED_CONFORMANCE_OUT": str(run_dir / "conformance-out")})
    if target == "conformance":
        return [*_cli(), "conformance", "--backend", "kwok", "--k8s", K8S,
                "--report", str(run_dir / "report")], {}
    if target == "try":
        return [*_cli(), "try", TRY_EXAMPLE, "--fleet", TRY_FLEET, "--k8s", K8S], {}
    if target == "density":
        return [*_cli(), "density", "--trace", DENSITY_TRACE, "--fleet", DENSITY_FLEET, "--modes", "whole", "--limit", "20",
                "--k8s", K8S, "--report", str(run_dir / "density-report")], {}
    raise ValueError(target)


def _default_signals() -> None:
    """The run starts as from a terminal: dispositions a runner set (nohup's ignored SIGHUP) are not handed on."""
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, signal.SIG_DFL)


@dataclass
class Leftovers(leftovers.Found):
    """What one run left behind: the scanner's findings, and the clusters whose directories are not empty."""

    clusters: list[str] = field(default_factory=list)  # "backend/name" with a non-empty directory left in the state

    def summary(self) -> str:
        parts = []
        for key, value in asdict(self).items():
            if not value:
                continue
            if key == "processes":
                value = sorted({_component(line) for line in value.values()})
                parts.append(f"processes ({len(self.processes)}): {', '.join(value)}")
            elif key == "files":
                parts.append(f"files: {len(value)} ({', '.join(value[:3])}{', ...' if len(value) > 3 else ''})")
            else:
                parts.append(f"{key}: {', '.join(map(str, value))}")
        return "; ".join(parts) or "none"


def _component(line: str) -> str:
    """A short name for a process's command line: the program, or the module of `python -m`."""
    words = line.split()
    if "-m" in words[:-1]:
        return words[words.index("-m") + 1]
    return Path(words[0]).name if words else "?"


def _environ_has(pid: int, needle: bytes) -> bool:
    try:
        return needle in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def ours(state: Path, marker: str) -> dict[int, str]:
    """Processes of a run: its environment marker (inherited by everything it started, whatever session it
    moved to), or its state directory on the command line; this process left out."""
    needle = f"{MARKER_ENV}={marker}\0".encode()
    text = str(state)
    return {pid: line for pid, line in leftovers.processes().items()
            if pid != os.getpid() and (text in line or _environ_has(pid, needle))}


def cluster_dirs(state: Path) -> list[tuple[str, str, Path]]:
    """(backend, name, directory) of every cluster directory in the state: our homes and kwokctl's own."""
    found = []
    for home in sorted((state / "clusters").glob("*/*")):
        if home.is_dir():
            found.append((home.parent.name, home.name, home))
    for folder in sorted((state / "kwok" / "clusters").glob("*")):
        if folder.is_dir():
            found.append(("kwok", folder.name, folder))
    return found


def _socket_root(home: Path) -> Path:
    from testbed.drivers.ours.kwok import socket_root  # our driver's sockets on KWOK

    return socket_root(home)


def _in_use_by_others(mount: str, ours_: dict[int, str]) -> bool:
    """Whether a process not of this run works in or below `mount`'s folder (its root, working directory or
    command line there): another run's image build (debootstrap's chroot mounts its proc), not this run's leftover."""
    folder = str(Path(mount).parent)
    for pid, line in leftovers.processes().items():
        if pid in ours_ or pid == os.getpid():
            continue
        if folder in line:
            return True
        for link in ("root", "cwd"):
            try:
                if os.readlink(f"/proc/{pid}/{link}").startswith(folder):
                    return True
            except OSError:
                continue
    return False


def scan(state: Path, marker: str, pgid: int, before: dict, seen_homes: set[Path]) -> Leftovers:
    """What the run of `state`/`marker` (process group `pgid`) left, against the machine's `before` snapshot."""
    found = ours(state, marker)
    for pid in procs.group_members(pgid):
        if pid not in found and pid != os.getpid():
            found[pid] = leftovers._cmdline(pid) or f"pid {pid}"
    after = leftovers.snapshot()
    change = leftovers.diff(before, after)
    # every port one of the run's processes listens on (in its own network namespace): those not listened on
    # before the run are its own; the others it could only hold if they had been freed meanwhile
    held = {port for _, _, port in leftovers.listeners_of(list(found))}
    files = []
    clusters = []
    for backend, name, folder in cluster_dirs(state):
        content = [str(p.relative_to(state)) for p in folder.rglob("*") if not p.is_dir() and p.name not in KEEP_FILES]
        if content:
            clusters.append(f"{backend}/{name}")
            files += content
    temp = [str(root) for root in sorted({_socket_root(home) for home in seen_homes}) if root.exists()]
    return Leftovers(
        processes=found,
        ports=sorted(held),
        containers=change.containers,
        mounts=sorted(set(mounted_below(state)) | set(m for m in change.mounts if m.startswith(str(state)))
                      | {m for m in set(after.get("stale_mounts", [])) - set(before.get("stale_mounts", []))
                         if not _in_use_by_others(m, found)}),
        clusters=sorted(set(clusters)),
        files=sorted(files),
        temp=temp,
    )


def settled_scan(state: Path, marker: str, pgid: int, before: dict, seen_homes: set[Path], settle: float = 5.0) -> Leftovers:
    """`scan`, again for up to `settle` seconds while it finds something: a component killed just now may take a
    moment to exit and release its port."""
    deadline = time.monotonic() + settle
    while (found := scan(state, marker, pgid, before, seen_homes)) and time.monotonic() < deadline:
        time.sleep(0.25)
    return found


def note_homes(state: Path, seen: set[Path]) -> None:
    """Remember every cluster home seen in the state while the run goes on (its socket folder outlives it)."""
    seen.update(home for home in (state / "clusters").glob("*/*") if home.is_dir())


def clean_up(state: Path, marker: str, found: Leftovers, env: dict[str, str]) -> list[str]:
    """Remove what a run left: `dra-testbed down` per cluster in its state, then end its processes, then the
    socket folders. Returns what it did, one line each."""
    done = []
    for backend, name in sorted({(backend, name) for backend, name, _ in cluster_dirs(state)}):
        if backend not in ("kwok", "kind"):
            continue
        out = subprocess.run([*_cli(), "down", "--name", name, "--backend", backend], env=env, cwd=REPO,
                             capture_output=True, text=True, timeout=300)
        done.append(f"dra-testbed down --name {name} --backend {backend}: exit {out.returncode}")
    for pid in sorted(ours(state, marker)):
        procs.terminate(pid)
        done.append(f"ended pid {pid}")
    for root in found.temp:
        shutil.rmtree(root, ignore_errors=True)
        done.append(f"removed {root}")
    return done


@dataclass
class Run:
    index: int
    target: str
    delay: float
    exit_code: int | None
    ended_before_signal: bool
    hung: bool
    seconds_to_exit: float | None
    leftovers: dict
    summary: str
    cleanup: list[str]

    @property
    def finding(self) -> bool:
        return self.hung or self.summary != "none"


def interrupt_once(index: int, target: str, delay: float, work: Path, wait: float, keep: bool,
                   reached=None, selection: tuple[str, ...] = TESTS_SELECTION) -> Run:
    """One run of `target`: SIGINT to its process group `delay` seconds after its start (or, with `reached`,
    as soon as `reached(state, marker)` holds, `delay` then being the limit), then the scan and the clean-up."""
    run_dir = Path(tempfile.mkdtemp(prefix=f"{target}-{index:02d}-", dir=work))
    state = run_dir / "state"
    marker = uuid.uuid4().hex
    args, extra = command(target, run_dir, selection)
    env = dict(os.environ, DRA_TESTBED_STATE=str(state), PYTHONFAULTHANDLER="1", **{MARKER_ENV: marker}, **extra)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)
    before = leftovers.snapshot()
    seen: set[Path] = set()
    with open(run_dir / "output.log", "wb") as log:
        proc = subprocess.Popen(args, cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                start_new_session=True, preexec_fn=_default_signals)
    started = time.monotonic()
    try:
        return _drive(index, target, delay, wait, keep, reached, proc, run_dir, state, marker, env, before, seen, started)
    except BaseException:  # the benchmark itself was stopped: the run it started goes too, and what it left
        _abandon(proc, state, marker, env)
        raise


def _abandon(proc: subprocess.Popen, state: Path, marker: str, env: dict[str, str]) -> None:
    """Stop a run the benchmark cannot finish (SIGINT to its group, 60 s, SIGKILL) and remove what it left."""
    try:
        os.killpg(proc.pid, signal.SIGINT)
        proc.wait(timeout=60)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        proc.wait()
    clean_up(state, marker, Leftovers(), env)


def _drive(index, target, delay, wait, keep, reached, proc, run_dir, state, marker, env, before, seen, started) -> Run:
    pgid = proc.pid
    deadline = started + delay
    while time.monotonic() < deadline and proc.poll() is None:
        note_homes(state, seen)
        if reached is not None and reached(state, marker):
            break
        time.sleep(0.1)
    actual = time.monotonic() - started
    ended_before = proc.poll() is not None
    hung = False
    exit_code = proc.returncode
    signalled = time.monotonic()
    if not ended_before:
        os.killpg(pgid, signal.SIGINT)
        while True:
            try:
                exit_code = proc.wait(timeout=0.5)
                break
            except subprocess.TimeoutExpired:
                note_homes(state, seen)
                if time.monotonic() - signalled > wait:
                    hung = True
                    try:
                        os.killpg(pgid, signal.SIGKILL)
                    except ProcessLookupError:
                        pass
                    exit_code = proc.wait()
                    break
    to_exit = None if ended_before else round(time.monotonic() - signalled, 2)
    found = settled_scan(state, marker, pgid, before, seen)
    done = clean_up(state, marker, found, env) if found or hung else []
    if done and (still := scan(state, marker, pgid, before, seen)):
        done.append(f"still there after the clean-up: {still.summary()}")
    if not keep:
        shutil.rmtree(run_dir, ignore_errors=True)
    return Run(index, target, round(actual, 2), exit_code, ended_before, hung, to_exit,
               {k: (list(map(str, v.items())) if isinstance(v, dict) else v) for k, v in asdict(found).items()},
               found.summary(), done)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", type=int, default=20, help="moments to interrupt (default 20), spread over the targets")
    parser.add_argument("--seed", type=int, default=None, help="seed of the moments (default: random, printed)")
    parser.add_argument("--target", action="append", choices=TARGETS, help="repeatable; default all four")
    parser.add_argument("--max-delay", type=float, default=90.0, help=f"latest moment in seconds after the start (default 90; at least {MIN_DELAY})")
    parser.add_argument("--wait", type=float, default=120.0, help="seconds a run gets to exit after the SIGINT (default 120)")
    parser.add_argument("--report", help="write every run as JSON to this file")
    parser.add_argument("--work-dir", default=None, help="where the runs' state directories go (default: a temporary one)")
    parser.add_argument("--keep", action="store_true", help="keep each run's directory (output.log) afterwards")
    args = parser.parse_args(argv)
    if args.runs < 1 or args.max_delay < MIN_DELAY or args.wait <= 0:
        print("interrupt_anywhere: error: --runs >= 1, --max-delay >= 2 and --wait > 0", file=sys.stderr)
        return 2
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**32)
    rng = random.Random(seed)
    targets = args.target or list(TARGETS)
    work = Path(args.work_dir or tempfile.mkdtemp(prefix="interrupt-anywhere-"))
    work.mkdir(parents=True, exist_ok=True)
    print(f"seed {seed}; targets {', '.join(targets)}; moments {MIN_DELAY:.0f}-{args.max_delay:.0f} s; work in {work}", flush=True)
    runs: list[Run] = []
    try:
        for index in range(args.runs):
            target = targets[index % len(targets)]
            delay = rng.uniform(MIN_DELAY, args.max_delay)
            run = interrupt_once(index, target, delay, work, args.wait, args.keep)
            runs.append(run)
            when = "ended before the signal" if run.ended_before_signal else f"exit {run.exit_code} {run.seconds_to_exit}s after SIGINT"
            print(f"{index:2d} {target:11s} delay {run.delay:6.2f}s  {when}{'  HUNG (SIGKILLed)' if run.hung else ''}  "
                  f"leftovers: {run.summary}", flush=True)
    finally:
        if args.report:
            Path(args.report).write_text(json.dumps({"seed": seed, "targets": targets, "max_delay": args.max_delay,
                                                     "runs": [dict(asdict(r), finding=r.finding) for r in runs]}, indent=2) + "\n")
        if not args.keep and not args.work_dir:
            shutil.rmtree(work, ignore_errors=True)
    bad = sum(r.finding for r in runs)
    print(f"{len(runs)} runs, {bad} with leftovers", flush=True)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
