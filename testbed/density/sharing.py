"""Claims of a fleet whose GPUs are shared (consumable capacity, `whole:shares=memory|<N>`): a pod's share as capacity.

- `shares=memory`: a pod of `gpu_milli` < 1000 asks `capacity.requests.memory` of that fraction of its GPU's
  memory, rounded up to whole MiB (the devices' request policy has step 1Mi from 1Mi, so any whole MiB is
  taken as asked and rounding up never gives a pod less than its share). A whole-GPU or multi-GPU pod names
  no capacity: the policy's default is the whole memory, so nothing shares its GPUs.
- `shares=<N>`: a pod asks `capacity.requests.shares` of ceil(gpu_milli * N / 1000) (at least 1, at most N)
  and no memory. Under <N> the memory policy's default is 0, so memory is no constraint and the shares alone
  carry the pod's part, as counted shares do on NVIDIA's driver; asking memory too would only repeat the same
  fraction. A whole-GPU pod asks all N shares.

The trace has no GPU memory (its memory_mib is host RAM), so the share stands for memory as it does for
compute. A fleet of boards with different memory gets one `firstAvailable` subrequest per memory size (the
device's memory capacity selects it), smallest board first; a fleet of one size gets one.
"""

from __future__ import annotations

import math
from typing import Iterable

from fake_gpus.catalog import get_board
from fake_gpus.driver.identity import DriverIdentity
from fake_gpus.node import Mode
from testbed.density.trace import TracePod

SHARING_KINDS = ("whole",)  # the density replay shares whole GPUs; MIG devices keep the MIG mapping


def memory_sizes(boards: Iterable[str]) -> tuple[int, ...]:
    """The distinct GPU memory sizes (MiB) of the fleet's boards, smallest first."""
    return tuple(sorted({get_board(key).memory_mib for key in boards}))


def memory_request_mib(gpu_milli: int, memory_mib: int) -> int:
    """A share's memory on a GPU of `memory_mib`: whole MiB, rounded up, at least 1."""
    return max(1, math.ceil(gpu_milli * memory_mib / 1000))


def shares_request(gpu_milli: int, shares: int) -> int:
    """A share's count of a GPU cut into `shares`: rounded up, 1..shares."""
    return min(shares, max(1, math.ceil(gpu_milli * shares / 1000)))


def capacity_asked(pod: TracePod, mode: Mode, memory_mib: int) -> dict[str, str]:
    """What the claim of `pod` asks of each of its GPUs in sharing `mode` ({} for the capacity's default)."""
    if mode.shares == "memory":
        return {} if pod.gpu_milli >= 1000 else {"memory": f"{memory_request_mib(pod.gpu_milli, memory_mib)}Mi"}
    if mode.shares and mode.shares.isdigit():
        return {"shares": str(shares_request(pod.gpu_milli, int(mode.shares)))}
    raise ValueError(f"mode {mode}: the density replay shares by memory or by <N> shares, not {mode.shares!r}")


def shared_claim_body(pod: TracePod, name: str, mode: Mode, sizes: tuple[int, ...], identity: DriverIdentity) -> dict:
    """The ResourceClaim of `pod`, named `name`, on a fleet of GPUs shared as `mode` says."""
    subrequests = []
    for memory_mib in sizes:
        sub: dict = {"name": f"gpu-{memory_mib}mi", "deviceClassName": identity.gpu_class, "count": pod.num_gpu}
        asked = capacity_asked(pod, mode, memory_mib)
        if asked:
            sub["capacity"] = {"requests": asked}
        if len(sizes) > 1:  # the request above is in this board's terms: only its GPUs may take it
            sub["selectors"] = [{"cel": {"expression": f"device.capacity['{identity.driver}'].memory"
                                                       f".compareTo(quantity('{memory_mib}Mi')) == 0"}}]
        subrequests.append(sub)
    return {"apiVersion": "resource.k8s.io/v1", "kind": "ResourceClaim",
            "metadata": {"name": name, "labels": {"dra-testbed.io/density": "true"}},
            "spec": {"devices": {"requests": [{"name": "gpu", "firstAvailable": subrequests}]}}}
