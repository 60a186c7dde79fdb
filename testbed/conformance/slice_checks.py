"""Checks on the driver's ResourceSlices as the API serves them: limits, pools, nodes, life cycle, counters.

The limits are Kubernetes' (pkg/apis/resource/validation per minor, tabulated in ApiLimits); NVIDIA's
MIG tables come from the catalog. Nothing here reads the driver's own state.
"""

from __future__ import annotations

import time
import uuid
from collections import defaultdict
from decimal import Decimal

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import CatalogError
from fake_gpus.driver.slices import api_limits, server_minor
from testbed.clusters.layout import Mode, NodeSpec
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.kube.slice_diff import fingerprint, restart_changes
from testbed.conformance.subject import Subject
from testbed.kube.waiting import wait_for
from testbed.workloads.devices import Inventory
from testbed.workloads.truth import board_of

MAX_STRING = 64  # attribute string values (validation: DeviceAttributeMaxValueLength)
SETTLE = 15.0  # seconds a pool may take to become consistent after a change


def _fail_if(problems: list[str], evidence: Evidence, what: str) -> None:
    if problems:
        evidence.write("problems.json", problems)
        more = f" (and {len(problems) - 1} more, see evidence)" if len(problems) > 1 else ""
        raise CheckFailed(f"{what}: {problems[0]}{more}")


def served_api(subject: Subject, evidence: Evidence) -> None:
    version = client.VersionApi(subject.api).get_code()
    minor = server_minor(version)
    groups = {g.name: [v.version for v in g.versions] for g in client.ApisApi(subject.api).get_api_versions().groups}
    served = groups.get("resource.k8s.io", [])
    evidence.write("served.json", {"server": version.git_version, "resource.k8s.io": served})
    if "v1" not in served:
        raise CheckFailed(f"the cluster does not serve resource.k8s.io/v1 (serves {served or 'nothing'})")
    limits = api_limits(minor)
    slices = subject.slices()
    evidence.write("slices.json", slices)
    if not slices:
        raise CheckFailed(f"no ResourceSlice of driver {subject.driver} is served")
    problems = []
    published = {s["spec"].get("nodeName") for s in slices}
    problems += [f"GPU node {n} has no ResourceSlice of {subject.driver}" for n in sorted(subject.expected_nodes()) if n not in published]
    for s in slices:
        name, spec = s["metadata"]["name"], s["spec"]
        devices = spec.get("devices") or []
        consuming = any(d.get("consumesCounters") for d in devices)
        cap = limits.max_devices_consuming if consuming else limits.max_devices
        if len(devices) > cap:
            problems.append(f"slice {name}: {len(devices)} devices, limit {cap}")
        if limits.separate_counter_slices and devices and spec.get("sharedCounters"):
            problems.append(f"slice {name}: sharedCounters and devices in one slice, which {minor} forbids")
        for counter_set in spec.get("sharedCounters") or []:
            if len(counter_set.get("counters") or {}) > limits.max_counters_per_set:
                problems.append(f"slice {name}: counter set {counter_set['name']} over {limits.max_counters_per_set} counters")
        for d in devices:
            fields = len(d.get("attributes") or {}) + len(d.get("capacity") or {})
            if fields > limits.max_attributes_and_capacities:
                problems.append(f"slice {name} device {d['name']}: {fields} attributes and capacities, limit {limits.max_attributes_and_capacities}")
            for key, value in (d.get("attributes") or {}).items():
                if isinstance(value.get("string"), str) and len(value["string"]) > MAX_STRING:
                    problems.append(f"slice {name} device {d['name']}: attribute {key} longer than {MAX_STRING} characters")
    _fail_if(problems, evidence, f"slices of {subject.driver} on Kubernetes {minor}")


def _pool_problems(slices: list[dict]) -> list[str]:
    pools: dict[str, list[dict]] = defaultdict(list)
    for s in slices:
        pools[s["spec"]["pool"]["name"]].append(s)
    problems = []
    for pool, members in sorted(pools.items()):
        newest = max(m["spec"]["pool"]["generation"] for m in members)
        current = [m for m in members if m["spec"]["pool"]["generation"] == newest]
        counts = {m["spec"]["pool"]["resourceSliceCount"] for m in current}
        if len(counts) > 1:
            problems.append(f"pool {pool} generation {newest}: slices disagree on resourceSliceCount {sorted(counts)}")
        elif len(current) != counts.pop():
            problems.append(f"pool {pool} generation {newest}: {len(current)} slices, resourceSliceCount {current[0]['spec']['pool']['resourceSliceCount']}")
        names = [d["name"] for m in current for d in m["spec"].get("devices") or []]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            problems.append(f"pool {pool}: device names published twice: {', '.join(duplicates[:5])}")
    return problems


def pools_consistent(subject: Subject, evidence: Evidence) -> None:
    deadline = time.monotonic() + SETTLE
    while True:  # a pool being rewritten is briefly mixed: only a lasting inconsistency is a failure
        slices = subject.slices()
        problems = _pool_problems(slices)
        if not problems or time.monotonic() > deadline:
            break
        time.sleep(1)
    evidence.write("pools.json", [{"slice": s["metadata"]["name"], "pool": s["spec"]["pool"]} for s in slices])
    _fail_if(problems, evidence, "pools")


def _gpu_ids(devices) -> set[str]:
    """Distinct physical GPUs among devices: a whole GPU's uuid, a MIG device's parentUUID."""
    ids = set()
    for d in devices:
        value = d.attribute("parentUUID") if d.attribute("type") == "mig" else d.attribute("uuid")
        ids.add(str(value) if value else f"{d.id.pool}/{d.id.device}")
    return ids


def node_local(subject: Subject, evidence: Evidence) -> None:
    slices = subject.slices()
    nodes = {n.metadata.name for n in subject.core.list_node().items}
    problems = [f"slice {s['metadata']['name']} names node {s['spec']['nodeName']!r}, which does not exist"
                for s in slices if s["spec"].get("nodeName") and s["spec"]["nodeName"] not in nodes]
    inventory = Inventory.from_slices(slices)
    seen = {}
    for name, spec in sorted(subject.expected_nodes().items()):
        gpus = _gpu_ids(inventory.on_node(name))
        seen[name] = sorted(gpus)
        if gpus and len(gpus) != spec.count:  # none at all is slices.served-api's finding
            problems.append(f"node {name} has {spec.count} GPUs ({spec.board}); its slices show {len(gpus)}")
    evidence.write("gpus-per-node.json", seen)
    _fail_if(problems, evidence, "node-local slices")


def removed_with_node(subject: Subject, evidence: Evidence) -> None:
    if subject.add_node is None:
        raise NotRun("needs node control (the suite adds and deletes a GPU node)")
    name = f"conf-join-{uuid.uuid4().hex[:6]}"
    subject.add_node(NodeSpec(name, "h100-80gb", 1, Mode("whole")))
    selector = f"spec.nodeName={name}"
    try:
        wait_for(subject.resource.list_resource_slice, lambda s: s.spec.driver == subject.driver, field_selector=selector,
                 timeout=60, what=f"slices of the new node {name}")
        published = [s.metadata.name for s in subject.resource.list_resource_slice(field_selector=selector).items]
        evidence.write("joined.json", {"node": name, "slices": published})
    finally:
        try:
            subject.core.delete_node(name)
        except ApiException as exc:
            if exc.status != 404:
                raise
    deadline = time.monotonic() + 60
    while (left := [s.metadata.name for s in subject.resource.list_resource_slice(field_selector=selector).items]) and time.monotonic() < deadline:
        time.sleep(0.5)
    evidence.write("after-delete.json", {"node": name, "slices left": left})
    if left:
        for s in left:  # leave the cluster as found
            subject.resource.delete_resource_slice(s)
        raise CheckFailed(f"60 s after node {name} was deleted its slices are still there: {', '.join(left)}")


def stable_restart(subject: Subject, evidence: Evidence) -> None:
    if subject.restart_driver is None:
        raise NotRun("needs to restart the driver (a test bed of the suite's own)")
    before = fingerprint(subject.slices())
    try:
        subject.restart_driver()
    except Exception as exc:  # noqa: BLE001 - the driver not coming back is the finding
        raise CheckFailed(f"the driver did not come back after a restart: {str(exc).splitlines()[0][:300]}") from None
    # a driver may republish shortly after it reports ready (a kind bed's restart also waits out the
    # kubelet's wipe of a gone plugin's slices, 30 s after it went: a driver whose slices were wiped and
    # published again shows here as a new generation or a rewrite)
    time.sleep(3)
    after = fingerprint(subject.slices())
    changes, notes = restart_changes(before, after)
    evidence.write("restart.json", {"before": {k: v["generation"] for k, v in before.items()},
                                    "after": {k: v["generation"] for k, v in after.items()}, "changes": changes,
                                    "not churn (device order carries no meaning)": notes})
    if changes or notes:
        evidence.write("slices-before.json", {k: v["spec"] for k, v in before.items()})
        evidence.write("slices-after.json", {k: v["spec"] for k, v in after.items()})
    _fail_if(changes, evidence, "after a driver restart with nothing changed")


def _consumers(inventory: Inventory):
    for device in inventory.devices.values():
        for set_id, counters in device.consumes:
            yield device, set_id, dict(counters)


def within_counter_set(subject: Subject, evidence: Evidence) -> None:
    inventory = Inventory.from_slices(subject.slices())
    if not inventory.counters:
        raise NotRun(f"driver {subject.driver} publishes no shared counters (no partitionable devices)")
    problems = []
    checked = 0
    for device, set_id, counters in _consumers(inventory):
        checked += 1
        values = inventory.counters.get(set_id)
        if values is None:
            problems.append(f"{device.id.pool}/{device.id.device} consumes counter set {set_id.name}, which its pool does not publish")
            continue
        for counter, amount in counters.items():
            if counter not in values:
                problems.append(f"{device.id.device} consumes {counter}, which counter set {set_id.name} does not have")
            elif amount > values[counter]:
                problems.append(f"{device.id.device} consumes {amount} {counter}, more than set {set_id.name} offers ({values[counter]})")
        board = board_of(device)
        if device.attribute("type") != "mig" or board is None:
            continue
        try:
            profile = board.profile(str(device.attribute("profile")))
        except CatalogError:
            continue  # an unknown profile name is names.mig-profiles' finding
        slots = sorted(int(c.rsplit("-", 1)[1]) for c in counters if c.startswith("memory-slice-"))
        contiguous = bool(slots) and slots == list(range(slots[0], slots[0] + len(slots)))
        if len(slots) != profile.memory_slices or not contiguous:
            problems.append(f"{device.id.device} ({profile.name}) consumes memory slices {slots}; the profile covers {profile.memory_slices} contiguous slices")
        elif slots[0] not in profile.placements:
            problems.append(f"{device.id.device} ({profile.name}) starts at memory slice {slots[0]}; NVIDIA's placements start at {list(profile.placements)}")
    evidence.write("summary.json", {"counter sets": len(inventory.counters), "consuming devices": checked})
    _fail_if(problems, evidence, "counter consumption")


def full_device_consumes_all(subject: Subject, evidence: Evidence) -> None:
    inventory = Inventory.from_slices(subject.slices())
    if not inventory.counters:
        raise NotRun(f"driver {subject.driver} publishes no shared counters (no partitionable devices)")
    full: dict = defaultdict(list)
    for device, set_id, counters in _consumers(inventory):
        if device.attribute("type") == "gpu":
            full[set_id].append((device, counters))
    problems = []
    for set_id, values in sorted(inventory.counters.items(), key=lambda kv: str(kv[0])):
        if not full.get(set_id):
            problems.append(f"counter set {set_id.pool}/{set_id.name}: no full-GPU device consumes it")
        for device, counters in full.get(set_id, []):
            short = {c: f"{counters.get(c, Decimal(0))} of {v}" for c, v in values.items() if counters.get(c) != v}
            if short:
                problems.append(f"{device.id.pool}/{device.id.device} consumes of {set_id.name}: {short}")
    evidence.write("full-devices.json", {str(k): [d.id.device for d, _ in v] for k, v in full.items()})
    _fail_if(problems, evidence, "full GPUs")

