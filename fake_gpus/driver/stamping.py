"""ResourceSlices stamped from templates: built once per node shape, filled in per node.

A node's slices depend on what NVML reports (boards, MIG state, driver version), the mode, the served
API's limits and the fault switches; nodes of one shape differ only in identities: node name and uid,
each GPU's UUID and PCI address, each MIG device's UUID, and the pool generation. So the slices are
built once (by `build_slices`, the one builder) for a stand-in inventory whose identities are unique
stand-in values, kept as JSON text, and stamped per node by replacing the stand-ins in one regex pass.
The inventory itself is still read through NVML for every node: the template is chosen by what NVML
reported, never by what the catalog says the board should be.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from dataclasses import dataclass, replace

from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.driver.nvml_adapter import Gpu, NodeInventory
from fake_gpus.driver.slices import ApiLimits, build_slices, whole_gpu_device
from fake_gpus.node import Mode

STAND_IN_NODE = "zz-stamp-node"
STAND_IN_UID = "zz-stamp-uid"
STAND_IN_GENERATION = 987654321987  # no real pool reaches it; the JSON holds it as `"generation":987654321987`
_GENERATION = f'"generation":{STAND_IN_GENERATION}'


@dataclass(frozen=True)
class StampedSlice:
    """One slice of a node as JSON text (generation still the stand-in), with a digest of that text."""

    name: str
    text: str
    digest: bytes

    def body(self, generation: int) -> bytes:
        """The slice to send, at pool `generation`."""
        return self.text.replace(_GENERATION, f'"generation":{generation}', 1).encode()


def _stand_in_gpu(gpu: Gpu, position: int) -> Gpu:
    uuid = f"GPU-00000000-0000-0000-0000-{position:012d}"
    migs = tuple(replace(m, gpu_uuid=uuid, uuid=f"MIG-00000000-0000-0000-0000-{position:04d}{j:08d}") for j, m in enumerate(gpu.mig_devices))
    return replace(gpu, uuid=uuid, pci_bus_id=f"00000000:{0xA0 + position:02X}:00.0",
                   mig_devices=migs)


def _string_values(device: dict) -> dict[str, str]:
    return {k: v["string"] for k, v in device["attributes"].items() if "string" in v}


def _identity_strings(gpu: Gpu, inv: NodeInventory, driver: str) -> dict[str, str]:
    """The string attributes of a GPU's devices that name that GPU (UUID, PCI address, PCIe root)."""
    values = _string_values(whole_gpu_device(gpu, inv, driver))
    other = _string_values(whole_gpu_device(_stand_in_gpu(gpu, 99), inv, driver))
    return {k: v for k, v in values.items() if other[k] != v}


@dataclass
class _Template:
    """A shape's slices as JSON text cut at the stand-ins: parts[odd] are stand-ins, parts[even] text."""

    slices: list[tuple[str, tuple[str, ...]]]
    identities: list[dict[str, str]]  # per GPU: attribute -> stand-in value


class Stamper:
    """Templates by node shape; `stamp` gives a node's slices exactly as `build_slices` would build them."""

    def __init__(self, identity: DriverIdentity, limits: ApiLimits, faults: frozenset[str] = frozenset()) -> None:
        self.identity, self.limits, self.faults = identity, limits, faults
        self.templates: dict[tuple, _Template] = {}
        self._lock = threading.Lock()

    def _template(self, standin: NodeInventory, mode: Mode, owned: bool) -> _Template:
        key = (standin, mode, owned)
        with self._lock:
            found = self.templates.get(key)
        if found is not None:
            return found
        bodies = build_slices(STAND_IN_NODE, standin, mode, self.limits, self.identity, self.faults,
                              STAND_IN_GENERATION, STAND_IN_UID if owned else None)
        stand_ins = {STAND_IN_NODE, STAND_IN_UID}
        identities = [_identity_strings(gpu, standin, self.identity.driver) for gpu in standin.gpus]
        for gpu, strings in zip(standin.gpus, identities):
            stand_ins |= {f'"{v}"' for v in strings.values()}
            stand_ins |= {f'"{m.uuid}"' for m in gpu.mig_devices}
        pattern = re.compile("(" + "|".join(map(re.escape, sorted(stand_ins, key=len, reverse=True))) + ")")
        found = _Template([(b["metadata"]["name"], tuple(pattern.split(json.dumps(b, separators=(",", ":"))))) for b in bodies],
                          identities)
        with self._lock:
            return self.templates.setdefault(key, found)

    def stamp(self, node: str, uid: str | None, inv: NodeInventory, mode: Mode) -> list[StampedSlice]:
        """`node`'s slices (uid None: no owner reference, as with build_slices)."""
        standin = replace(inv, gpus=tuple(_stand_in_gpu(g, i) for i, g in enumerate(inv.gpus)))
        template = self._template(standin, mode, uid is not None)
        values = {STAND_IN_NODE: node, STAND_IN_UID: uid or ""}
        driver = self.identity.driver
        for fake, real, before in zip(standin.gpus, inv.gpus, template.identities):
            after = _string_values(whole_gpu_device(real, inv, driver))
            values.update({f'"{v}"': json.dumps(after[k]) for k, v in before.items()})
            values.update({f'"{a.uuid}"': json.dumps(b.uuid) for a, b in zip(fake.mig_devices, real.mig_devices)})
        stamped = []
        for name, parts in template.slices:
            pieces = list(parts)
            pieces[1::2] = [values[p] for p in parts[1::2]]
            text = "".join(pieces)
            stamped.append(StampedSlice(name.replace(STAND_IN_NODE, node), text, hashlib.blake2b(text.encode(), digest_size=16).digest()))
        return stamped
