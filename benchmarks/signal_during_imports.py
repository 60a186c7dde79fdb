"""A signal landing while two threads import: how many runs hang, with a handler that raises at once
(the baseline: what testbed.host.interrupts did before) against testbed.host.interrupts, in the same run.

    python benchmarks/signal_during_imports.py [--runs 200] [--signal SIGHUP] [--wait 10]

Each run starts a child that imports fresh modules in a loop on its main thread and on a second thread
(as `up` does while the publisher's client modules preload), then sends it the signal at a random moment.
A raise inside importlib's own code (its module-lock weakref callback) is swallowed and leaves the global
import lock held: the child goes on, then hangs in its cleanup's import. A run that has not exited
`--wait` seconds after the signal counts as hung and is killed. Exit 0 when testbed.host.interrupts hung in
no run; 1 otherwise. Bad settings: one line, exit 2.
"""

from __future__ import annotations

import argparse
import os
import random
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

CHILD = textwrap.dedent("""
    import importlib, signal, sys, threading
    from testbed.host import interrupts

    sys.path.insert(0, sys.argv[2])
    def churn(lo, hi):
        while True:
            for i in range(lo, hi):
                sys.modules.pop(f"m{i}", None)
                importlib.import_module(f"m{i}")

    if sys.argv[1] == "ours":
        interrupts.install()
    else:  # the baseline: raise wherever the signal lands
        def naive(signum, frame):
            raise KeyboardInterrupt
        for s in interrupts.HANDLED:
            signal.signal(s, naive)
    threading.Thread(target=churn, args=(0, 100), daemon=True).start()
    try:
        print("importing", flush=True)
        churn(100, 200)
    except KeyboardInterrupt:
        pass
    finally:
        importlib.import_module("json.decoder")  # the cleanup imports something, as ours does
    print("cleaned up", flush=True)
""")

# a module body of some weight, like the client's model modules: a few classes with methods
MODULE = "class A{0}:\n    def f(self):\n        return {0}\n"


def write_modules(folder: Path, count: int = 200) -> None:
    for i in range(count):
        (folder / f"m{i}.py").write_text("".join(MODULE.format(k) for k in range(20)))


def one_run(handler: str, modules: Path, signum: int, wait: float) -> str:
    """'exited <code>' or 'hung'."""
    child = subprocess.Popen([sys.executable, "-c", CHILD, handler, str(modules)], stdout=subprocess.PIPE, text=True,
                             env=dict(os.environ, PYTHONPATH=str(REPO)), start_new_session=True)
    try:
        child.stdout.readline()
        time.sleep(random.uniform(0.02, 0.3))
        child.send_signal(signum)
        try:
            return f"exited {child.wait(timeout=wait)}"
        except subprocess.TimeoutExpired:
            return "hung"
    finally:
        if child.poll() is None:
            os.killpg(child.pid, signal.SIGKILL)
            child.wait()
        child.stdout.close()


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--runs", type=int, default=200, help="runs per handler (default 200)")
    p.add_argument("--signal", default="SIGHUP", choices=("SIGINT", "SIGTERM", "SIGHUP"))
    p.add_argument("--wait", type=float, default=10.0, help="seconds after the signal before a run counts as hung")
    p.add_argument("--seed", type=int, default=0, help="seed of the signal times")
    args = p.parse_args(argv)
    if args.runs < 1 or not 0 < args.wait < 600:
        p.error("--runs must be >= 1 and --wait between 0 and 600 seconds")
    random.seed(args.seed)
    signum = signal.Signals[args.signal]
    outcomes: dict[str, dict[str, int]] = {"naive": {}, "ours": {}}
    with tempfile.TemporaryDirectory(prefix="signal-imports-") as tmp:
        write_modules(Path(tmp))
        for run in range(args.runs):
            for handler in ("naive", "ours"):  # interleaved, so both see the same machine load
                outcome = one_run(handler, Path(tmp), signum, args.wait)
                outcomes[handler][outcome] = outcomes[handler].get(outcome, 0) + 1
            if (run + 1) % 25 == 0:
                print(f"  {run + 1}/{args.runs} runs: naive {outcomes['naive']}, ours {outcomes['ours']}", flush=True)
    hung = {h: o.get("hung", 0) for h, o in outcomes.items()}
    print(f"{args.signal} while two threads import, {args.runs} runs each:")
    for handler, label in (("naive", "raise at once (baseline)"), ("ours", "testbed.host.interrupts")):
        print(f"  {label:26} hung {hung[handler]:4}  outcomes {dict(sorted(outcomes[handler].items()))}")
    print(f"  hung ratio ours/baseline: {hung['ours']}/{hung['naive']}")
    return 0 if hung["ours"] == 0 else 1


if __name__ == "__main__":
    sys.exit(main())
