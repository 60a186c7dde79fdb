"""Benchmark: Hypothesis examples per minute of the allocation state machine with the `ci` profile.

Brings up the whole-GPU property cluster once (not timed), then runs the state machine `--rounds`
times with the ci profile (no example database, so every round generates fresh examples) and reports
examples, steps and pods per minute over the timed part. Goal: >= 30 examples/minute on 2 cores.

    python benchmarks/properties_rate.py [--rounds 3] [--profile ci] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
import uuid
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

os.environ.setdefault("DRA_TESTBED_HYPOTHESIS_PROFILE", "ci")

from hypothesis import settings  # noqa: E402
from hypothesis.stateful import run_state_machine_as_test  # noqa: E402

import testbed.workloads.profiles as props  # noqa: E402  (registers the profiles)
from testbed.workloads.machine import allocation_machine  # noqa: E402
from testbed.clusters.base import ClusterSpec  # noqa: E402
from testbed.clusters.registry import cluster_for
from testbed.workloads.bundle import layout_yaml  # noqa: E402


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", default="ci", choices=("ci", "dev", "nightly"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()

    profile = settings.get_profile(args.profile)
    run_settings = settings(profile, database=None)
    cluster = cluster_for("kwok", f"prop-bench-{uuid.uuid4().hex[:6]}")
    try:
        cluster.create(ClusterSpec(name=cluster.name, layout=props.WHOLE_LAYOUT))
        api = cluster.api_client()
        stats: dict[str, int] = {}
        with tempfile.TemporaryDirectory() as bundles:
            machine = allocation_machine(api, layout_yaml(props.WHOLE_LAYOUT), Path(bundles) / "bench", stats=stats)
            started = time.monotonic()
            for _ in range(args.rounds):
                run_state_machine_as_test(machine, settings=run_settings)
            elapsed = time.monotonic() - started
        api.close()
    finally:
        cluster.delete()
    minutes = elapsed / 60
    pods = stats.get("scheduled", 0) + stats.get("rejected", 0)
    result = {
        "profile": args.profile, "rounds": args.rounds, "seconds": round(elapsed, 1),
        "examples": stats.get("examples", 0), "examples_per_minute": round(stats.get("examples", 0) / minutes, 1),
        "pods_per_minute": round(pods / minutes, 1), "stats": stats, "cpus": os.cpu_count(),
        "load_average": os.getloadavg()[0],
    }
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"{result['examples']} examples in {result['seconds']}s with the {args.profile} profile: "
              f"{result['examples_per_minute']} examples/min, {result['pods_per_minute']} pods/min "
              f"({os.cpu_count()} CPUs, load {result['load_average']:.1f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
