"""NVIDIA-compatible names (profile `gpu.nvidia.com`): classes, attribute and capacity names and types, MIG profiles.

So that manifests written for NVIDIA's DRA driver run unchanged, a driver publishes the names NVIDIA's
driver publishes (DESIGN.md section 3) and the values NVIDIA's tables give for the product (catalog).
"""

from __future__ import annotations

from kubernetes.client.exceptions import ApiException

from fake_gpus.catalog import CatalogError
from testbed.conformance import probes
from testbed.conformance.outcome import CheckFailed, Evidence, NotRun
from testbed.conformance.slice_checks import _fail_if
from testbed.conformance.subject import Subject
from testbed.workloads.devices import Inventory
from testbed.workloads.truth import board_of

MIB = 2**20
PRODUCT = {"productName": "string", "brand": "string", "architecture": "string", "cudaComputeCapability": "version",
           "driverVersion": "version", "cudaDriverVersion": "version"}
GPU_ATTRIBUTES = {"type": "string", "uuid": "string", **PRODUCT, "resource.kubernetes.io/pciBusID": "string"}
MIG_ATTRIBUTES = {"type": "string", "parentUUID": "string", "profile": "string", **PRODUCT}
MIG_CAPACITIES = ("multiprocessors", "copyEngines", "decoders", "encoders", "jpegEngines", "ofaEngines", "memory")


def device_classes(subject: Subject, evidence: Evidence) -> None:
    served = {}
    for name in (subject.gpu_class, subject.mig_class):
        try:
            dc = subject.resource.read_device_class(name)
            served[name] = [s.cel.expression for s in dc.spec.selectors or [] if s.cel]
        except ApiException as exc:
            if exc.status != 404:
                raise
    evidence.write("device-classes.json", served)
    missing = [n for n in (subject.gpu_class, subject.mig_class) if n not in served]
    if missing:
        raise CheckFailed(f"DeviceClass {missing[0]} does not exist")
    # What a class selects is seen by asking for what it must not give: no device of the other type anywhere.
    namespace = subject.namespace()
    try:
        attr = f"device.attributes['{subject.driver}'].type"
        seen = {}
        for cls, kind in ((subject.gpu_class, "gpu"), (subject.mig_class, "mig")):
            probe = probes.run(subject, namespace, [probes.exactly("r", cls, f"{attr} != '{kind}'")])
            seen[cls] = probe.as_dict()
            if probe.scheduled:
                raise CheckFailed(f"DeviceClass {cls} gave device {probe.devices()} whose type is not {kind!r}")
        evidence.write("probes.json", seen)
    finally:
        subject.drop_namespace(namespace)


def _types(raw: dict) -> dict[str, str]:
    return {name: next(iter(k for k, v in value.items() if v is not None), "?") for name, value in (raw.get("attributes") or {}).items()}


def attributes(subject: Subject, evidence: Evidence) -> None:
    problems = []
    counted = {"gpu": 0, "mig": 0}
    for s in subject.slices():
        for raw in s["spec"].get("devices") or []:
            types = _types(raw)
            kind = (raw.get("attributes") or {}).get("type", {}).get("string")
            if kind not in ("gpu", "mig"):
                problems.append(f"device {raw['name']}: attribute type is {kind!r}, expected 'gpu' or 'mig'")
                continue
            counted[kind] += 1
            wanted = GPU_ATTRIBUTES if kind == "gpu" else MIG_ATTRIBUTES
            for name, value_type in wanted.items():
                if name not in types:
                    problems.append(f"{kind} device {raw['name']}: no attribute {name}")
                elif types[name] != value_type:
                    problems.append(f"{kind} device {raw['name']}: attribute {name} is a {types[name]}, NVIDIA's is a {value_type}")
            capacities = ("memory",) if kind == "gpu" else MIG_CAPACITIES
            problems += [f"{kind} device {raw['name']}: no capacity {c}" for c in capacities if c not in (raw.get("capacity") or {})]
    evidence.write("summary.json", counted)
    if not any(counted.values()):
        raise CheckFailed(f"driver {subject.driver} publishes no devices")
    _fail_if(problems, evidence, "NVIDIA's names")


def mig_profiles(subject: Subject, evidence: Evidence) -> None:
    inventory = Inventory.from_slices(subject.slices())
    problems, checked = [], 0
    for device in inventory.devices.values():
        board = board_of(device)
        if device.attribute("type") != "mig" or board is None:
            continue
        checked += 1
        name = device.attribute("profile")
        try:
            profile = board.profile(str(name))
        except CatalogError:
            valid = ", ".join(p.name for p in board.gpu_instance_profiles)
            problems.append(f"{device.id.device}: profile {name!r} is not one of NVIDIA's for {board.product_name} ({valid})")
            continue
        memory = device.capacity_of("memory")
        if profile.memory_mib is not None and memory != profile.memory_mib * MIB:
            problems.append(f"{device.id.device} ({profile.name}): memory {memory / MIB if memory else None} MiB, NVIDIA's is {profile.memory_mib} MiB")
        sms = device.capacity_of("multiprocessors")
        if profile.multiprocessors is not None and sms != profile.multiprocessors:
            problems.append(f"{device.id.device} ({profile.name}): {sms} multiprocessors, NVIDIA's is {profile.multiprocessors}")
    evidence.write("summary.json", {"MIG devices of known products": checked})
    if not checked:
        raise NotRun("no MIG device of a product in NVIDIA's tables is published")
    _fail_if(problems, evidence, "MIG profiles")


def gpu_memory(subject: Subject, evidence: Evidence) -> None:
    inventory = Inventory.from_slices(subject.slices())
    problems, checked = [], 0
    for device in inventory.devices.values():
        board = board_of(device)
        if device.attribute("type") != "gpu" or board is None:
            continue
        checked += 1
        allowed = {board.memory_mib}
        if device.consumes:  # NVIDIA's full partitionable GPU states the largest profile's memory
            allowed |= {p.memory_mib for p in board.gpu_instance_profiles if p.memory_slices == board.memory_slices and p.memory_mib}
        memory = device.capacity_of("memory")
        if memory is None or memory / MIB not in allowed:
            shown = f"{memory / MIB} MiB" if memory is not None else "none"
            problems.append(f"{device.id.pool}/{device.id.device} ({board.product_name}): memory {shown}, NVML reports {board.memory_mib} MiB")
    evidence.write("summary.json", {"GPUs of known products": checked})
    if not checked:
        raise NotRun("no whole GPU of a product in NVIDIA's tables is published")
    _fail_if(problems, evidence, "GPU memory")

