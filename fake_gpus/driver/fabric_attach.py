"""Fabric-attached GPUs (KEP-5007, device binding conditions): devices the scheduler may allocate but must not
bind a pod to until they are attached to the node.

Composable systems keep GPUs in a fabric-attached pool and attach one to a host only once it is chosen; until
the attach is done a pod on that host would find no GPU. With $DRA_TESTBED_FABRIC_ATTACH set (seconds the
attach takes), the publisher marks every device it publishes with the binding condition
`dra-testbed.io/attached` (and the failure condition `dra-testbed.io/attach-failed`), and the scheduler waits
in PreBind until the claim's `status.devices` entry of each such device has that condition True. One
controller in the publisher process (not one per node) plays the fabric manager: it finds claims allocated
such devices and, the attach delay after it first saw each, applies the condition (claim_status.py: its own
field manager, so the kubelet plugin's Ready entry of the same device stands beside it).

Served from 1.34 behind DRADeviceBindingConditions (alpha, off by default in 1.34 and 1.35: the API server
drops the fields from the slices and pods bind at once), beta and on by default from 1.36. A claim whose
condition never comes is unallocated by the scheduler after its binding timeout (DynamicResourcesArgs
bindingTimeout, 600 s by default).
"""

from __future__ import annotations

import hashlib
import json
import sys
import threading
import time
from datetime import datetime, timezone
from typing import Callable, Iterable, Mapping

from fake_gpus.driver.claim_status import Apply, condition, error_text, status_body
from fake_gpus.driver.stamping import StampedSlice

ATTACH_ENV = "DRA_TESTBED_FABRIC_ATTACH"
ATTACHED = "dra-testbed.io/attached"
ATTACH_FAILED = "dra-testbed.io/attach-failed"
NEVER_SET = "binding-condition-never-set"  # fault switch: the controller never attaches
FIELD_MANAGER_SUFFIX = "/fabric-attach"
POLL_SECONDS = 0.5  # how often the controller lists claims (only while the mode is on: test beds)


class AttachSettingError(ValueError):
    """$DRA_TESTBED_FABRIC_ATTACH is not a number of seconds."""


def attach_delay(environ: Mapping[str, str]) -> float | None:
    """The attach delay in seconds the environment asks for; None: the mode is off."""
    text = environ.get(ATTACH_ENV, "").strip()
    if not text:
        return None
    try:
        delay = float(text)
    except ValueError:
        delay = -1.0
    if not 0 <= delay <= 3600:
        raise AttachSettingError(f"${ATTACH_ENV}={text!r} is not valid; valid: seconds the attach takes, 0 to 3600 (unset: off)")
    return delay


def with_binding_conditions(stamped: list[StampedSlice]) -> list[StampedSlice]:
    """A node's stamped slices with every device waiting for the attach before binding."""
    out = []
    for s in stamped:
        body = json.loads(s.text)
        for device in body["spec"].get("devices") or []:
            device["bindingConditions"] = [ATTACHED]
            device["bindingFailureConditions"] = [ATTACH_FAILED]
        text = json.dumps(body, separators=(",", ":"))
        out.append(StampedSlice(s.name, text, hashlib.blake2b(text.encode(), digest_size=16).digest()))
    return out


def waiting_devices(claim: dict, driver: str) -> list[dict]:
    """The allocation results of `driver` in `claim` that wait for the attach and do not have it yet."""
    status = claim.get("status") or {}
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    done = {(e.get("pool"), e.get("device"), e.get("shareID", "")) for e in status.get("devices") or []
            if e.get("driver") == driver and any(c.get("type") == ATTACHED and c.get("status") == "True" for c in e.get("conditions") or [])}
    return [r for r in results if r.get("driver") == driver and ATTACHED in (r.get("bindingConditions") or [])
            and (r.get("pool"), r.get("device"), r.get("shareID", "")) not in done]


def attached_entries(claim: dict, driver: str, now: datetime) -> list[dict]:
    """The controller's entries for every attach-waiting device of `claim`, attached (the apply must list all of
    them: one it left out would lose its condition)."""
    results = ((claim["status"].get("allocation") or {}).get("devices") or {}).get("results") or []
    entries, seen = [], set()
    for r in results:
        key = (r["pool"], r["device"], r.get("shareID", ""))
        if r.get("driver") != driver or ATTACHED not in (r.get("bindingConditions") or []) or key in seen:
            continue
        seen.add(key)
        entry = {"driver": driver, "pool": r["pool"], "device": r["device"]}
        if r.get("shareID"):
            entry["shareID"] = r["shareID"]
        entry["conditions"] = [condition(ATTACHED, "Attached", f"attached to node {r['pool']} through the fabric", now)]
        entries.append(entry)
    return entries


class AttachController:
    """Attaches the devices of allocated claims `delay` seconds after it first saw them waiting."""

    def __init__(self, driver: str, delay: float, list_claims: Callable[[], Iterable[dict]], apply: Apply,
                 faults: frozenset[str] = frozenset(), log: Callable[[str], None] | None = None,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.driver, self.delay = driver, delay
        self.list_claims, self.apply = list_claims, apply
        self.faults = faults
        self.log = log or (lambda m: print(f"fabric-attach: {m}", file=sys.stderr, flush=True))
        self.clock = clock
        self.field_manager = driver + FIELD_MANAGER_SUFFIX
        self.first_seen: dict[str, float] = {}  # claim UID -> when it was first seen waiting

    def round(self) -> list[str]:
        """One look at every claim; the UIDs attached in it."""
        now = self.clock()
        waiting, attached = set(), []
        for claim in self.list_claims():
            meta = claim["metadata"]
            if not waiting_devices(claim, self.driver):
                continue
            waiting.add(meta["uid"])
            seen = self.first_seen.setdefault(meta["uid"], now)
            if NEVER_SET in self.faults or now - seen < self.delay:
                continue
            try:
                self.apply(meta["namespace"], meta["name"], status_body(meta["namespace"], meta["name"], meta["uid"],
                                                                        attached_entries(claim, self.driver, datetime.now(timezone.utc))),
                           self.field_manager)
                attached.append(meta["uid"])
            except Exception as exc:  # noqa: BLE001 - tried again next round
                self.log(f"claim {meta['namespace']}/{meta['name']}: attaching failed: {error_text(exc)}")
        for uid in set(self.first_seen) - waiting:  # attached, unallocated or gone
            del self.first_seen[uid]
        return attached

    def run(self, stop: threading.Event) -> None:
        while not stop.is_set():
            try:
                self.round()
            except Exception as exc:  # noqa: BLE001 - a failed list is tried again; the controller never dies
                self.log(f"listing claims failed: {error_text(exc)}")
            stop.wait(POLL_SECONDS)

    def start(self, stop: threading.Event) -> threading.Thread:
        thread = threading.Thread(target=self.run, args=(stop,), name="fabric-attach", daemon=True)
        thread.start()
        return thread
