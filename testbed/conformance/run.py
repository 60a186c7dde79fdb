"""Run a selection of checks on a subject: one Outcome per check, in table order, each with its evidence.

A check the backend cannot run, or that needs a capability the subject lacks, is `not-run` with the
reason; an exception other than CheckFailed is `error` (the suite broke, not necessarily the driver).
"""

from __future__ import annotations

import time
import traceback
from pathlib import Path
from typing import Callable, Iterable

from testbed.conformance import (generated, name_checks, node_checks, nvml_state_checks, sched_checks, share_checks, slice_checks,
                                  strategy_checks, health_checks)
from testbed.conformance.checks import Check
from testbed.conformance.outcome import ERROR, FAIL, NOT_RUN, PASS, CheckFailed, Evidence, NotRun, Outcome
from testbed.conformance.subject import Subject
from testbed.host import interrupts

Probe = Callable[[Subject, Evidence], None]

PROBES: dict[str, Probe] = {
    "slices.served-api": slice_checks.served_api,
    "slices.pools-consistent": slice_checks.pools_consistent,
    "slices.node-local": slice_checks.node_local,
    "slices.removed-with-node": slice_checks.removed_with_node,
    "slices.stable-restart": slice_checks.stable_restart,
    "partitions.within-counter-set": slice_checks.within_counter_set,
    "partitions.full-device-consumes-all": slice_checks.full_device_consumes_all,
    "shares.published": share_checks.published,
    "sched.shared-capacity": share_checks.shared_capacity,
    "node.time-slicing": strategy_checks.time_slicing,
    "names.device-classes": name_checks.device_classes,
    "names.attributes": name_checks.attributes,
    "names.mig-profiles": name_checks.mig_profiles,
    "names.gpu-memory": name_checks.gpu_memory,
    "sched.exact": sched_checks.exact,
    "sched.first-available": sched_checks.first_available,
    "sched.all": sched_checks.all_devices,
    "sched.match-attribute": sched_checks.match_attribute,
    "sched.partitions": sched_checks.partitions,
    "sched.generated": generated.generated,
    "health.fatal-xid-taints": health_checks.fatal_xid,
    "health.lost-gpu": health_checks.lost_gpu,
    "health.heal": health_checks.heal,
    "health.ignored-xid": health_checks.ignored_xid,
    "node.nvml-state": nvml_state_checks.nvml_state,
    "slices.nvml-agree": node_checks.nvml_agrees,
    "node.prepare-unprepare": node_checks.prepare_unprepare,
    "node.container-sees-its-devices": node_checks.container_sees_its_devices,
    "node.several-claims-containers": node_checks.several_claims_containers,
    "node.shared-claim": node_checks.shared_claim,
    "node.init-containers": node_checks.init_containers,
    "node.force-delete-unprepare": node_checks.force_delete_unprepare,
    "node.prepare-retried": node_checks.prepare_retried,
    "node.plugin-restart": node_checks.plugin_restart,
    "node.rolling-update": node_checks.rolling_update,
    "node.admin-access": node_checks.admin_access,
    "node.generated": generated.node_generated,
}


def _why_not(check: Check, subject: Subject) -> str | None:
    if subject.backend not in check.backends:
        return f"backend {subject.backend} cannot run it (runs on: {', '.join(check.backends)})"
    missing = [n for n in check.needs if n not in subject.capabilities()]
    if missing:
        return f"needs {', '.join(missing)}, which this subject does not offer"
    if check.id not in PROBES:
        return "no probe for this check yet (node side: not implemented in this suite)"
    return None


def run_check(check: Check, subject: Subject, root: Path, log: Callable[[str], None] = lambda _: None) -> Outcome:
    """Run one check and return its outcome; never raises for the driver's faults."""
    evidence = Evidence(root, check.id)
    started = time.monotonic()
    reason = _why_not(check, subject)
    if reason:
        verdict, message = NOT_RUN, reason
    else:
        log(f"RUN   {check.id}")
        try:
            PROBES[check.id](subject, evidence)
            verdict, message = PASS, ""
        except CheckFailed as exc:
            verdict, message = FAIL, str(exc)
        except NotRun as exc:
            verdict, message = NOT_RUN, str(exc)
        except Exception as exc:  # noqa: BLE001 - the suite's own failure is recorded, the run goes on
            if interrupts.received():
                # Ctrl-C or SIGTERM landed in the check and a cleanup on the way out raised in its place (an API
                # call refused mid-teardown): the run stops, it must not go on to an "incomplete" verdict
                raise KeyboardInterrupt(f"interrupted during {check.id}") from exc
            evidence.write("traceback.txt", traceback.format_exc())
            verdict, message = ERROR, f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"
        finally:
            subject.close()  # the check's namespaces (pods, claims) go before the next check starts
    outcome = Outcome(check.id, check.level, verdict, message, round(time.monotonic() - started, 3), evidence.files, check.requirement)
    log(f"{verdict.upper():5} {check.id} ({outcome.duration:.1f}s){': ' + message if message else ''}")
    return outcome


def run_checks(checks: Iterable[Check], subject: Subject, root: Path, log: Callable[[str], None] = lambda _: None) -> list[Outcome]:
    """Every check in order; the subject's namespaces are removed afterwards."""
    try:
        return [run_check(c, subject, root, log) for c in checks]
    finally:
        subject.close()
