"""The long fault campaign: generated workloads while the plugin, publisher, scheduler, apiserver and etcd are
killed at random (100 kills by default), then the same seeds with zero kills, then each fault switch that
the campaign must catch (`unprepare-leaks`, `counters-undeclared`) with a few kills.

    python benchmarks/fault_campaign.py [--backend kwok|kind] [--kills 100] [--fault-kills 6] [--restart-backoff S] [--report DIR]

On kind the kubelets restart what is killed, with their crash-loop back-off (10 s doubling to 5 min, reset
after 10 min of running): 100 kills would wait hours. The kind beds therefore cap it at --restart-backoff
seconds (default 10; the kubelet's own `crashLoopBackOff.maxContainerRestartPeriod`, gate
KubeletCrashLoopBackOffMax); --restart-backoff 300 keeps the kubelet's default.

Prints kills per component, claims, leaks and double allocations per run, and whether the zero-kill run
gave the same verdicts; writes campaign.json to --report. Exit 0 when the clean runs show zero leaks and
zero double allocations with equal verdicts after every kill asked, every fault run shows more than zero,
and every killed unit served again; 1 otherwise (testbed.campaign.report.judge). Bad settings: one line, exit 2.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from hostenv.versions import UnknownVersionError, release_for  # noqa: E402
from testbed.host import interrupts  # noqa: E402
from testbed.campaign.report import judge, table  # noqa: E402
from testbed.campaign.beds import campaign_cluster  # noqa: E402
from testbed.campaign.session import CAMPAIGN_LAYOUT  # noqa: E402
from testbed.clusters.kind.cluster import BACKOFF_RANGE  # noqa: E402

FAULTS = ("unprepare-leaks", "counters-undeclared")
# the clean run ends when its kills are done, not at Session.run's 50 seeds: 8 seeds took 38 s on a quiet machine
# (suites/robustness/test_fault_campaign.py), and 100 kills 4-10 s apart take longer than 50 such seeds
CLEAN_MAX_SEEDS = 100_000


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("kwok", "kind"), default="kwok")
    p.add_argument("--k8s", default=os.environ.get("DRA_TESTBED_K8S", "1.34"))
    p.add_argument("--kills", type=int, default=100, help="kills in the clean run (default 100)")
    p.add_argument("--fault-kills", type=int, default=6, help="kills in each fault run (default 6)")
    p.add_argument("--seed", type=int, default=0, help="first workload seed")
    p.add_argument("--examples", type=int, default=3, help="examples per seed")
    p.add_argument("--steps", type=int, default=6, help="steps per example")
    p.add_argument("--interval", default="4,10", help="seconds between kills, MIN,MAX")
    p.add_argument("--faults", default=",".join(FAULTS), help=f"fault runs after the clean ones (default {','.join(FAULTS)}; 'none': no fault runs)")
    p.add_argument("--restart-backoff", type=int, default=10, metavar="S",
                   help=f"kind: the kubelets' crash-loop back-off cap in seconds, {BACKOFF_RANGE[0]}-{BACKOFF_RANGE[1]} "
                        f"(default 10; {BACKOFF_RANGE[1]} is the kubelet's default)")
    p.add_argument("--report", type=Path, default=Path("reports/campaign"))
    p.add_argument("--gpu-failures", type=int, default=0, metavar="N", help="GPUs failed and healed beside the kills of the clean run (KWOK)")
    p.add_argument("--label", default="bench", help="part of the clusters' names (campaign-LABEL-...), so that runs side by side do not collide")
    args = p.parse_args(argv)
    try:
        lo, hi = (float(x) for x in args.interval.split(","))
    except ValueError:
        p.error(f"--interval {args.interval!r}: expected MIN,MAX in seconds, e.g. 4,10")
    if args.kills < 0 or args.fault_kills < 0 or not 0 < lo <= hi or not math.isfinite(hi):
        p.error("--kills and --fault-kills must be >= 0 and --interval 0 < MIN <= MAX, finite")
    if not BACKOFF_RANGE[0] <= args.restart_backoff <= BACKOFF_RANGE[1]:
        p.error(f"--restart-backoff {args.restart_backoff}: the kubelet takes {BACKOFF_RANGE[0]} to {BACKOFF_RANGE[1]} seconds")
    if args.gpu_failures < 0 or (args.gpu_failures and args.backend != "kwok"):
        p.error(f"--gpu-failures {args.gpu_failures}: valid: 0, or a count >= 1 with --backend kwok (it writes KWOK nodes' fake NVML)")
    if args.examples < 1 or args.steps < 1:
        p.error("--examples and --steps must be >= 1")
    try:
        release_for(args.k8s)
    except UnknownVersionError as exc:
        p.error(f"--k8s: {exc}")
    faults = [] if args.faults == "none" else [f for f in args.faults.split(",") if f]
    unknown = [f for f in faults if f not in FAULTS]
    if unknown:
        p.error(f"--faults: {unknown[0]!r} is not a fault this campaign is shown to catch; valid: {', '.join(FAULTS)}, or none")
    if hasattr(sys.stdout, "reconfigure"):  # each seed's line as it ends, also into a file or a pipe (a long run)
        sys.stdout.reconfigure(line_buffering=True)
    interrupts.install()  # SIGTERM and SIGHUP remove the clusters as Ctrl-C does; a second signal waits for that
    runs: dict = {}
    args.report.mkdir(parents=True, exist_ok=True)

    def save(label: str, result):  # after each run: an exception or Ctrl-C later keeps what was done
        runs[label] = result
        (args.report / "campaign.json").write_text(json.dumps({k: r.as_dict() for k, r in runs.items()}, indent=1, default=str))
        return result

    started = time.monotonic()
    settings = dict(examples=args.examples, steps=args.steps, logs_to=args.report / "logs")
    if args.backend == "kind":
        settings["restart_backoff_max"] = args.restart_backoff
    with campaign_cluster(args.backend, CAMPAIGN_LAYOUT, [], f"{args.label}-{os.getpid()}", args.k8s, **settings) as session:
        save("kills", session.run(args.kills, first_seed=args.seed, interval=(lo, hi), max_seeds=CLEAN_MAX_SEEDS, gpu_failures=args.gpu_failures))
        save("zero kills", session.run(0, seeds=[s.seed for s in runs["kills"].seeds]))
    for fault in faults:
        # a leak is what is still there 30 s after the claims are gone (the clean runs allow 60 s)
        with campaign_cluster(args.backend, CAMPAIGN_LAYOUT, [fault], f"{args.label}-{fault}-{os.getpid()}", args.k8s, **settings,
                              quiet_timeout=30.0) as session:
            save(f"{fault}, kills", session.run(args.fault_kills, first_seed=args.seed, interval=(lo, hi), max_seeds=6))
            save(f"{fault}, zero kills", session.run(0, seeds=[s.seed for s in runs[f"{fault}, kills"].seeds]))
    print(table(runs))
    chaos, calm = runs["kills"], runs["zero kills"]
    print(f"wall with {len(chaos.kills)} kills / zero kills on the same seeds: {chaos.wall:.0f}s / {calm.wall:.0f}s = "
          f"{chaos.wall / max(calm.wall, 1e-9):.2f}x; verdicts {'equal' if chaos.verdicts() == calm.verdicts() else 'DIFFER'}")
    if chaos.gpu_failures:
        print(f"GPU failures beside the kills: {chaos.gpu_failures}; leaks {chaos.leaks}, double allocations {chaos.double_allocations}")
    problems = judge(runs)
    print(f"wall {time.monotonic() - started:.0f}s; report: {args.report / 'campaign.json'}")
    for line in problems:
        print(f"FAIL: {line}")
    return 1 if problems else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:  # Ctrl-C, SIGTERM or SIGHUP: the clusters are gone by now
        print(f"fault campaign: interrupted ({signal.Signals(interrupts.received() or signal.SIGINT).name}); its clusters are removed",
              file=sys.stderr)
        sys.exit(interrupts.exit_code())
