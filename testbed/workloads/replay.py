"""`dra-testbed replay BUNDLE`: a failing workload run again on a fresh cluster of any backend, with the
bundle's layout and driver faults (through ClusterSpec.driver, never this process's environment). Steps
that change the fleet (hardware evolution) replay on a fresh KWOK cluster only."""

from __future__ import annotations

import sys
import uuid
from pathlib import Path

from testbed.workloads.bundle import layout_yaml, load_bundle


def replay(directory: Path, *, k8s: str | None = None, keep: bool = False, kubeconfig: str | None = None,
           backend: str | None = None) -> int:
    """Bring up a fresh cluster of `backend` (default: the bundle's, else kwok) with the bundle's layout and
    driver faults (or use `kubeconfig`), re-run the steps.

    Returns 1 when a property still fails, 0 when the replay passes.
    """
    from fake_gpus.driver.faults import fault_env
    from testbed.clusters.base import ClusterSpec
    from hostenv.versions import DEFAULT_MINOR
    from testbed.clusters.driver import DriverSpec
    from testbed.beds import bed_session
    from testbed.workloads.steps import EVOLUTION

    layout, steps, context = load_bundle(directory)
    faults = context.get("faults") or ""
    evolves = sorted({s.op for s in steps if isinstance(s, EVOLUTION)})
    if evolves and (kubeconfig or (backend or context.get("backend") or "kwok") != "kwok"):
        raise ValueError(f"{directory}: its steps change the fleet ({', '.join(evolves)}), which only a fresh KWOK cluster "
                         "allows; valid: leave out --kubeconfig and use --backend kwok")
    # a fleet-changing replay switches the faults on by a driver update once the bed is up, as its test did: a
    # fault such as joined-node-unpublished would keep the bed's own nodes from coming up
    driver = DriverSpec(env=fault_env(faults.split(","))) if faults and not evolves else DriverSpec()
    spec = ClusterSpec(name=f"prop-replay-{uuid.uuid4().hex[:6]}", k8s=k8s or context.get("k8s") or DEFAULT_MINOR, layout=layout,
                       driver=driver)
    where = "existing" if kubeconfig else backend or context.get("backend") or "kwok"  # existing: checked, never stopped
    with bed_session(spec, where, keep=keep, kubeconfig=kubeconfig) as bed:
        if faults and evolves:
            from testbed.clusters.kwok.fleet import KwokFleet

            KwokFleet(bed.cluster, bed.api).roll_driver(fault_env(faults.split(",")))
        return _run(directory, bed.api, bed.cluster, layout, steps, context, evolves)


def _run(directory: Path, api, cluster, layout, steps, context: dict, evolves: list[str]) -> int:
    """The bundle's steps on the bed behind `api` (fleet changes through `cluster`); 1 when a property still fails."""
    from testbed.workloads.runner import PropertyFailure, Runner

    runner = Runner(api, layout_yaml(layout), bundle_dir=None, context=context).open()
    try:
        if evolves:
            from testbed.clusters.kwok.fleet import KwokFleet
            from testbed.workloads.evolution import Evolution

            Evolution(runner, KwokFleet(cluster, api)).run_steps(steps)
        else:
            runner.run_steps(steps)
    except PropertyFailure as failure:
        print(f"replay of {directory}: still failing\n{failure}", file=sys.stderr)
        return 1
    finally:
        runner.close()
    print(f"replay of {directory}: passes ({len(steps)} steps)", file=sys.stderr)
    return 0
